"""Broker settings under Kafka's own names, with Kafka's defaults.

Operators already know `server.properties`; accepting the same keys (and the same
`--override key=value` form as `kafka-server-start.sh`) means a Kafka config carries over. Keys
the broker itself does not read (group.*, offsets.*, log.*) are kept verbatim so the coordinator
and the log get them from the one source.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType

from kgroups.broker.kafka_settings import kafka_settings, unknown_setting_warning

# Only keys the broker reads itself; everything else is passed through untouched.
BROKER_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "node.id": "0",
        "cluster.id": "kgroups-cluster",
        "num.partitions": "1",
        "auto.create.topics.enable": "true",
        "socket.request.max.bytes": "104857600",
        # The largest frame a SASL listener reads before the client has authenticated.
        "sasl.server.max.receive.size": "524288",
        "socket.send.buffer.bytes": "102400",
        "socket.receive.buffer.bytes": "102400",
        # Kafka's default is -1 (no limit); kgroups holds answers in memory until clients read
        # them (Kafka sends fetched data from the page cache), so it sets a budget by default.
        "queued.max.request.bytes": "268435456",
        "kgroups.memory.exhausted.close.ms": "5000",
        # Prometheus metrics over HTTP (kgroups.broker.metrics): -1 = not served.
        "kgroups.metrics.port": "-1",
        "kgroups.metrics.host": "127.0.0.1",
        "fetch.max.bytes": "57671680",
        "connections.max.idle.ms": "600000",
        "queued.max.requests": "500",
        "message.max.bytes": "1048588",
        "offsets.topic.num.partitions": "50",
        "log.retention.check.interval.ms": "300000",
        # Kafka's default for both is Integer.MAX_VALUE; -1 here means the same: no limit.
        "max.connections": "-1",
        "max.connections.per.ip": "-1",
    }
)


# What the listeners and security read (kgroups.broker.security: listeners, state, authorizer);
# each may also be given per listener as listener.name.<name>.<key>.
SECURITY_SETTINGS = frozenset({
    "listeners", "listener.security.protocol.map", "sasl.enabled.mechanisms",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.client.auth", "ssl.principal.mapping.rules", "connection.failed.authentication.delay.ms",
    "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
    "max.connection.creation.rate",
})
PER_LISTENER_PREFIX = "listener.name."
# What cluster mode reads (docs/cluster.md); none is in BROKER_DEFAULTS, so a broker without
# `kgroups.storage` has exactly the settings it had before clusters existed. Kafka's names and
# defaults where Kafka has the setting.
STORAGE_SETTING = "kgroups.storage"
CLUSTER_SETTINGS: Mapping[str, str] = MappingProxyType({
    STORAGE_SETTING: "",
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
    # Default: broker.session.timeout.ms, so a broker's leases lapse when its session does.
    "kgroups.lease.ms": "",
    "kgroups.catalog.poll.interval.ms": "1000",
})


@functools.cache
def known_settings() -> frozenset[str]:
    """Every setting some part of kgroups reads; any other supplied key is warned about at
    start-up. (Imported here, not at the top: a network process reads its settings without
    loading the coordinator.)"""
    from kgroups.broker.group_configs import SHARE_PARTITION_SETTINGS
    from kgroups.coordinator.config import GroupCoordinatorConfig, property_name
    from kgroups.log.config import PROPERTY_NAMES as LOG_PROPERTY_NAMES

    return frozenset(
        {*BROKER_DEFAULTS, *CLUSTER_SETTINGS, "advertised.listeners", "log.cleaner.backoff.ms",
         "num.network.threads", *LOG_PROPERTY_NAMES, *SECURITY_SETTINGS,
         *SHARE_PARTITION_SETTINGS,
         *(property_name(spec.name) for spec in fields(GroupCoordinatorConfig))})


# Settings whose range kgroups deliberately makes wider than Kafka's (their type is still
# Kafka's), each for a reason: tiny segments let retention and compaction be tried on a few
# records; -1 keeps meaning "no limit", as kgroups' defaults say.
WIDER_THAN_KAFKA = frozenset({"log.segment.bytes", "max.connections", "max.connections.per.ip",
                              "num.network.threads"})
# Network processes (front_link) when num.network.threads is not given: none, for a broker
# embedded in another program (tests, serve_in_background), which shares its process's cores;
# `kgroups serve` asks for its own default (served_network_processes).
IN_PROCESS_NETWORK_THREADS = "0"


def served_network_processes(cores: int | None) -> int:
    """`kgroups serve`'s num.network.threads when not given: one network process when the
    broker may run on three cores or more, else none. Relaying a request through a network
    process costs more CPU in all (~25 µs more a commit, ~15 µs more a Heartbeat) than serving
    its socket in the broker process, which only pays off when the network process has a core
    nothing else wants. On 2 cores it shares one with the clients, the OS and everything else:
    with bench/broker.py's clients on the same 2 cores one process serves 1.28-1.45x the
    requests, and with a light load generator a network process serves 0.90-1.21x the requests
    of one process (bench/RESULTS.md, "network processes on 2 cores")."""
    return 1 if cores is not None and cores >= 3 else 0


def usable_cores() -> int | None:
    """The cores this process may run on (its CPU affinity, which a container or taskset may
    narrow), not all the machine has: what `served_network_processes` is given."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count()


class ConfigError(ValueError):
    """A setting is malformed; the message names the key and the offending text."""


def parse_properties(text: str, source: str = "<text>") -> dict[str, str]:
    """A `.properties` file read as Java reads Kafka's: `key=value` or `key: value`, `#`/`!`
    comments, a line ending in an odd number of backslashes continued on the next (whose
    leading blanks are dropped: Kafka's documented multi-line `sasl.jaas.config`), and
    `\\t`, `\\n`, `\\uXXXX` and `\\X` escapes. A line without `=` or `:` is refused, naming
    the file and line, where Java would take its first word as a key."""
    properties: dict[str, str] = {}
    for number, line in _logical_lines(text):
        separator = _separator(line)
        if separator <= 0:
            raise ConfigError(f"{source}:{number}: expected key=value, got {line!r}")
        key = _unescaped(line[:separator].strip())
        properties[key] = _unescaped(line[separator + 1 :].strip())
    return properties


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number of its first line, text) of each line that is neither blank nor a comment,
    continuation lines joined."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index].lstrip()
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if index == len(lines):
                break
            line += lines[index].lstrip()
            index += 1
        yield number, line


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _separator(line: str) -> int:
    """Where the first `=` or `:` not escaped by a backslash is; -1 for none."""
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in "=:":
            return index
    return -1


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")


def _unescaped(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: chr(int(m[1][1:], 16)) if len(m[1]) == 5
                       else _ESCAPES.get(m[1], m[1]), text)


def parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--override expects key=value, got {text!r}")
    return key.strip(), value.strip()


@dataclass(frozen=True)
class BrokerConfig:
    """The resolved settings of one broker; `properties` holds every key, defaults included."""

    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path("kgroups-data")
    properties: Mapping[str, str] = field(default_factory=lambda: dict(BROKER_DEFAULTS))
    # Defaults the program running the broker chose over kgroups' own (`kgroups serve`'s
    # num.network.threads): in `properties`, yet not settings an operator gave.
    defaults: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        data_dir: Path = Path("kgroups-data"),
        config_file: Path | None = None,
        overrides: Iterable[str] = (),
        defaults: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        """Defaults (the caller's `defaults` over kgroups' own), then the properties file, then
        each --override, as Kafka layers them."""
        merged = {**BROKER_DEFAULTS, **(defaults or {})}
        if config_file is not None:
            try:
                text = config_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot read config file {config_file}: {exc}") from exc
            merged.update(parse_properties(text, str(config_file)))
        merged.update(parse_override(item) for item in overrides)
        config = cls(host=host, port=port, data_dir=data_dir, properties=merged,
                     defaults=dict(defaults or {}))
        config.validate()
        return config

    def validate(self) -> None:
        """Read every typed key once so a bad value fails at start-up, not mid-request: first
        with the type and range Kafka gives it, then with kgroups' own rules and by building
        the coordinator's and the log's settings (whose errors name the key)."""
        for key, raw in self.supplied().items():
            setting = kafka_settings().get(key)
            problem = (setting.check(raw, with_range=key not in WIDER_THAN_KAFKA)
                       if setting is not None else None)
            if problem is not None:
                raise ConfigError(f"{key}={raw}: {problem}")
        for key in ("node.id", "num.partitions", "socket.request.max.bytes",
                    "sasl.server.max.receive.size",
                    "connections.max.idle.ms", "queued.max.requests", "message.max.bytes",
                    "offsets.topic.num.partitions", "log.retention.check.interval.ms",
                    "max.connections", "max.connections.per.ip", "socket.send.buffer.bytes",
                    "socket.receive.buffer.bytes", "queued.max.request.bytes",
                    "kgroups.memory.exhausted.close.ms", "fetch.max.bytes"):
            self.int_value(key)
        self._validate_memory()
        if self.num_network_threads < 0:
            raise ConfigError(f"num.network.threads must be >= 0, got {self.num_network_threads}")
        self.bool_value("auto.create.topics.enable")
        listener = self.advertised_listener
        if listener is not None and not 0 < listener[1] < 65536:
            raise ConfigError(f"advertised.listeners port must be in 1..65535, got {listener[1]}")
        if self.num_partitions < 1:
            raise ConfigError(f"num.partitions must be >= 1, got {self.num_partitions}")
        if self.log_retention_check_interval_ms < 1:
            raise ConfigError("log.retention.check.interval.ms must be >= 1, got "
                              f"{self.log_retention_check_interval_ms}")
        self._validate_cluster()
        if not 0 <= self.port < 65536:
            raise ConfigError(f"port must be in 0..65535, got {self.port}")
        if not -1 <= self.int_value("kgroups.metrics.port") < 65536:
            raise ConfigError("kgroups.metrics.port must be -1 (off) or in 0..65535, got "
                              f"{self.int_value('kgroups.metrics.port')}")
        from kgroups.coordinator.config import GroupCoordinatorConfig
        from kgroups.log.config import LogConfig

        try:
            LogConfig.from_properties(self.properties)
            GroupCoordinatorConfig.from_properties(self.with_prefixes("group.", "offsets."))
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc

    def supplied(self) -> dict[str, str]:
        """The settings an operator gave (those equal to kgroups' own defaults are not: some,
        like max.connections=-1, are values Kafka's ranges would refuse)."""
        defaults = {**BROKER_DEFAULTS, **self.defaults}
        return {key: value for key, value in self.properties.items()
                if defaults.get(key) != value}

    def unread_settings(self) -> dict[str, str]:
        """Each supplied setting kgroups does not read, with what to tell about it: a Kafka
        setting kgroups has no use for, or (a name Kafka does not have either) a typo, with the
        closest known name."""
        known = known_settings()
        return {key: unknown_setting_warning(key, known) for key in sorted(self.supplied())
                if key not in known and not key.startswith(PER_LISTENER_PREFIX)}

    def warnings(self) -> list[str]:
        """One line per supplied setting kgroups does not read: Kafka's or a typo."""
        return list(self.unread_settings().values())

    def _validate_cluster(self) -> None:
        url = self.storage_url
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(f"{STORAGE_SETTING} must be a postgresql:// URL, got a value "
                              f"starting {url.split(':', 1)[0]!r}")
        for key in ("broker.session.timeout.ms", "broker.heartbeat.interval.ms",
                    "kgroups.lease.ms", "kgroups.catalog.poll.interval.ms"):
            if self.cluster_int(key) < 1:
                raise ConfigError(f"{key} must be >= 1, got {self.cluster_int(key)}")
        if self.cluster_int("broker.heartbeat.interval.ms") >= self.lease_ms:
            raise ConfigError(
                f"broker.heartbeat.interval.ms ({self.cluster_int('broker.heartbeat.interval.ms')})"
                f" must be below kgroups.lease.ms ({self.lease_ms}): leases are renewed at "
                f"each heartbeat")

    def cluster_int(self, key: str) -> int:
        """A cluster-mode setting (CLUSTER_SETTINGS) as an integer, its default when unset."""
        raw = self.properties.get(key, "").strip() or CLUSTER_SETTINGS[key]
        if key == "kgroups.lease.ms" and not raw:
            return self.cluster_int("broker.session.timeout.ms")
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {raw!r}") from None

    @property
    def storage_url(self) -> str | None:
        """The PostgreSQL store of a cluster (`kgroups.storage`); None: the data directory,
        one broker on its own."""
        return self.properties.get(STORAGE_SETTING, "").strip() or None

    @property
    def lease_ms(self) -> int:
        return self.cluster_int("kgroups.lease.ms")

    def _validate_memory(self) -> None:
        """A budget smaller than the largest frame would leave such a frame waiting forever."""
        if self.socket_request_max_bytes < 1:
            raise ConfigError("socket.request.max.bytes must be >= 1, got "
                              f"{self.socket_request_max_bytes}")
        if self.sasl_server_max_receive_size < 1:
            raise ConfigError("sasl.server.max.receive.size must be >= 1, got "
                              f"{self.sasl_server_max_receive_size}")
        budget = self.queued_max_request_bytes
        if budget != -1 and budget < self.socket_request_max_bytes:
            raise ConfigError(
                f"queued.max.request.bytes must be -1 (no limit) or at least "
                f"socket.request.max.bytes ({self.socket_request_max_bytes}), got {budget}")
        for key in ("socket.send.buffer.bytes", "socket.receive.buffer.bytes"):
            value = self.int_value(key)
            if value != -1 and value < 1:
                raise ConfigError(f"{key} must be -1 (the OS default) or >= 1, got {value}")
        if self.memory_exhausted_close_ms < 1:
            raise ConfigError("kgroups.memory.exhausted.close.ms must be >= 1, got "
                              f"{self.memory_exhausted_close_ms}")
        if self.fetch_max_bytes < 1024:
            raise ConfigError(f"fetch.max.bytes must be >= 1024, got {self.fetch_max_bytes}")

    def int_value(self, key: str) -> int:
        raw = self.properties.get(key, BROKER_DEFAULTS.get(key))
        if raw is None:
            raise ConfigError(f"{key} is not set")
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {raw!r}") from None

    def bool_value(self, key: str) -> bool:
        raw = self.properties.get(key, BROKER_DEFAULTS.get(key, "")).lower()
        if raw not in ("true", "false"):
            raise ConfigError(f"{key} must be true or false, got {raw!r}")
        return raw == "true"

    def with_prefixes(self, *prefixes: str) -> dict[str, str]:
        """The keys another part owns (e.g. "group.", "offsets." for the coordinator)."""
        return {k: v for k, v in self.properties.items() if k.startswith(prefixes)}

    @property
    def advertised_listener(self) -> tuple[str, int] | None:
        """Host and port of the first `advertised.listeners` entry (`NAME://host:port`): what
        Metadata and FindCoordinator tell clients when they must not use the listen address."""
        raw = self.properties.get("advertised.listeners", "").strip()
        if not raw:
            return None
        first = raw.split(",")[0].strip()
        _, scheme_sep, address = first.partition("://")
        host, port_sep, port = address.rpartition(":")
        if not scheme_sep or not port_sep or not host or not port.isdigit():
            raise ConfigError(
                f"advertised.listeners must look like PLAINTEXT://host:port, got {raw!r}")
        return host, int(port)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where Prometheus metrics are served (port 0: a free one), None when off."""
        port = self.int_value("kgroups.metrics.port")
        if port < 0:
            return None
        return self.properties.get("kgroups.metrics.host", "127.0.0.1"), port

    @property
    def node_id(self) -> int:
        return self.int_value("node.id")

    @property
    def cluster_id(self) -> str:
        return self.properties.get("cluster.id", BROKER_DEFAULTS["cluster.id"])

    @property
    def num_partitions(self) -> int:
        return self.int_value("num.partitions")

    @property
    def auto_create_topics(self) -> bool:
        return self.bool_value("auto.create.topics.enable")

    @property
    def socket_request_max_bytes(self) -> int:
        return self.int_value("socket.request.max.bytes")

    @property
    def sasl_server_max_receive_size(self) -> int:
        """Kafka's limit on each frame a SASL connection sends before it has authenticated
        (ApiVersions, SaslHandshake, SaslAuthenticate): a larger one closes the connection at
        its size prefix, so an unauthenticated client cannot make the broker hold more."""
        return self.int_value("sasl.server.max.receive.size")

    @property
    def socket_send_buffer_bytes(self) -> int:
        """SO_SNDBUF of accepted sockets; -1 = the OS default."""
        return self.int_value("socket.send.buffer.bytes")

    @property
    def socket_receive_buffer_bytes(self) -> int:
        """SO_RCVBUF of accepted sockets; -1 = the OS default."""
        return self.int_value("socket.receive.buffer.bytes")

    @property
    def queued_max_request_bytes(self) -> int:
        """The memory budget of all connections together (see server.py); -1 = no limit."""
        return self.int_value("queued.max.request.bytes")

    @property
    def memory_exhausted_close_ms(self) -> int:
        """How long the budget may stay exhausted before the biggest holder is closed."""
        return self.int_value("kgroups.memory.exhausted.close.ms")

    @property
    def fetch_max_bytes(self) -> int:
        """The most record bytes one Fetch answer carries, whatever the client asks."""
        return self.int_value("fetch.max.bytes")

    @property
    def connections_max_idle_ms(self) -> int:
        return self.int_value("connections.max.idle.ms")

    @property
    def queued_max_requests(self) -> int:
        return self.int_value("queued.max.requests")

    @property
    def message_max_bytes(self) -> int:
        return self.int_value("message.max.bytes")

    @property
    def log_retention_check_interval_ms(self) -> int:
        return self.int_value("log.retention.check.interval.ms")

    @property
    def num_network_threads(self) -> int:
        """Network processes serving the sockets (0: this process serves them itself). Kafka's
        name for its network threads; kgroups' are processes, so they use other cores."""
        raw = self.properties.get("num.network.threads", IN_PROCESS_NETWORK_THREADS)
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"num.network.threads={raw}: not an integer") from None

    @property
    def max_connections(self) -> int:
        """Connections the broker accepts in all; negative = unlimited."""
        return self.int_value("max.connections")

    @property
    def max_connections_per_ip(self) -> int:
        """Connections one client host may hold; negative = unlimited."""
        return self.int_value("max.connections.per.ip")

    @property
    def offsets_topic_num_partitions(self) -> int:
        return self.int_value("offsets.topic.num.partitions")
