"""Dynamic broker settings: the topic defaults (`log.retention.ms`, `log.cleanup.policy`, ...)
changed at run time with IncrementalAlterConfigs, as `kafka-configs --alter --entity-type
brokers` does on Kafka, per broker or as the cluster default.

Kafka keeps them in its metadata log and layers them over the static settings: this broker's
own, then the cluster default, then `server.properties`, then Kafka's defaults. kgroups keeps
the two dynamic layers in `<data dir>/__broker_configs/` (written durably before they apply),
so they survive a restart as on Kafka, and rebuilds every topic's log settings from the
layers when they change. Only the settings kgroups can apply while running are dynamic here:
the broker-wide defaults of the topic settings it honours (log.flush.scheduler.interval.ms,
read once by the flusher, is not); any other name is refused, naming where to set it. A
cluster keeps the layers in its store instead (cluster/catalog_books.StoreBrokerConfigs: the
cluster default shared, each broker's own under its node id), and every broker reads them
again (`reload`) when the store's catalog version moves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from kgroups.broker.kafka_settings import kafka_settings
from kgroups.broker.topic_configs import (
    APPEND,
    DELETE,
    KAFKA_BROKER_DEFAULTS,
    SUBTRACT,
    ConfigChange,
    TopicConfigStore,
    merged_list,
)
from kgroups.log.config import LogConfig

DIRECTORY = "__broker_configs"
# Scopes: this broker's own layer and the cluster-wide default one (the empty resource name).
PER_BROKER, CLUSTER_DEFAULT = "broker", "default"
DYNAMIC_SETTINGS = frozenset({
    "log.cleanup.policy", "log.retention.ms", "log.retention.minutes", "log.retention.hours",
    "log.retention.bytes", "log.segment.bytes", "log.index.interval.bytes",
    "log.cleaner.delete.retention.ms", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.message.timestamp.type", "message.max.bytes", "compression.type",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
})


class DynamicConfigError(ValueError):
    """A change Kafka or kgroups refuses, with the error code Kafka answers it with (42
    INVALID_REQUEST, or 40 INVALID_CONFIG for an APPEND/SUBTRACT to a setting not a list)."""

    def __init__(self, message: str, error_code: int = 42) -> None:
        super().__init__(message)
        self.error_code = error_code


def _kafka_value_problem(name: str, raw: str) -> str | None:
    """Kafka's message for a value its broker ConfigDef refuses (ConfigException's wording)."""
    setting = kafka_settings()[name]
    text = raw.strip()
    prefix = f"Invalid value {raw} for configuration {name}: "
    if setting.type in ("INT", "LONG"):
        bound = 2**31 if setting.type == "INT" else 2**63
        try:
            number = int(text)
        except ValueError:
            return prefix + f"Not a number of type {setting.type}"
        if not -bound <= number < bound:
            return prefix + f"Not a number of type {setting.type}"
    elif setting.type == "LIST":
        choices = setting.validator.strip("[]").split(", ") if setting.validator else []
        wrong = [v.strip() for v in text.split(",") if choices and v.strip() not in choices]
        if wrong:
            return prefix.replace(raw, wrong[0]) + f"String must be one of: {', '.join(choices)}"
        return None
    problem = setting.check(raw)
    if problem is None:
        return None
    if setting.type == "STRING":
        return prefix + f"String must be one of: {setting.validator.strip('[]')}"
    return prefix + f"Value must be at least {setting.validator.strip('[').split(',')[0]}"


class BrokerConfigBook(Protocol):
    """Where the dynamic layers are kept, by scope (PER_BROKER, CLUSTER_DEFAULT)."""

    def load(self) -> dict[str, dict[str, str]]: ...

    def save(self, scope: str, layer: Mapping[str, str]) -> None:
        """Replace the scope's layer durably (empty: none)."""


class BrokerConfigFiles:
    """A single node's layers: one file per scope under the data directory."""

    def __init__(self, data_dir: Path) -> None:
        self._files = TopicConfigStore(data_dir, DIRECTORY)

    def load(self) -> dict[str, dict[str, str]]:
        return self._files.load_all()

    def save(self, scope: str, layer: Mapping[str, str]) -> None:
        if layer:
            self._files.save(scope, layer)
        else:
            self._files.remove(scope)


class DynamicBrokerConfigs:
    """The two dynamic layers over the static settings, loaded from and saved to a book."""

    def __init__(self, book: BrokerConfigBook | Path, static: Mapping[str, str]) -> None:
        """`book` a Path: a single node's data directory."""
        self._book = BrokerConfigFiles(book) if isinstance(book, Path) else book
        self._static = dict(static)
        self.layers = self._load()

    def _load(self) -> dict[str, dict[str, str]]:
        loaded = self._book.load()
        return {scope: loaded.get(scope, {}) for scope in (PER_BROKER, CLUSTER_DEFAULT)}

    def reload(self) -> bool:
        """Read the layers again (another broker of the cluster changed them); whether they
        changed (then the broker rebuilds its log settings)."""
        layers = self._load()
        changed = layers != self.layers
        self.layers = layers
        return changed

    def properties(self, layers: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, str]:
        """Every setting with the dynamic layers on top, this broker's own last."""
        chosen = self.layers if layers is None else layers
        return {**self._static, **chosen[CLUSTER_DEFAULT], **chosen[PER_BROKER]}

    def log_config(self) -> LogConfig:
        return LogConfig.from_properties(self.properties())

    def changed(self, scope: str, changes: Sequence[ConfigChange], *,
                replace: bool = False) -> dict[str, str]:
        """The scope's layer after `changes` (with `replace`, made of them alone), checked as
        Kafka checks a dynamic change (and refused for settings kgroups does not apply while
        running); nothing is saved."""
        fixed = sorted({c.name for c in changes} - DYNAMIC_SETTINGS)
        if fixed:
            raise DynamicConfigError(
                f"kgroups applies only these broker settings dynamically: "
                f"{', '.join(sorted(DYNAMIC_SETTINGS))}; set [{', '.join(fixed)}] at start-up "
                "(kgroups serve --override NAME=VALUE)")
        layer = {} if replace else dict(self.layers[scope])
        for change in changes:
            if change.operation == DELETE:
                layer.pop(change.name, None)
                continue
            value = str(change.value)
            if change.operation in (APPEND, SUBTRACT):
                if kafka_settings()[change.name].type != "LIST":
                    verb = "append" if change.operation == APPEND else "subtract"
                    raise DynamicConfigError(
                        f"Config value {verb} is not allowed for config key: {change.name}", 40)
                start = layer.get(change.name, KAFKA_BROKER_DEFAULTS.get(change.name, ""))
                value = merged_list(start, change)
            problem = _kafka_value_problem(change.name, value)
            if problem is not None:
                raise DynamicConfigError(problem)
            layer[change.name] = value
        try:
            LogConfig.from_properties(self.properties({**self.layers, scope: layer}))
        except ValueError as exc:
            raise DynamicConfigError(str(exc)) from exc
        return layer

    def replace(self, scope: str, layer: Mapping[str, str]) -> None:
        """Save the scope's layer durably, then use it."""
        self._book.save(scope, layer)
        self.layers[scope] = dict(layer)
