"""Group coordinator settings, under Kafka's broker property names and with Kafka's defaults.

Operators already know these names from `server.properties`; keeping them lets a Kafka config
file drive kgroups unchanged (unknown keys are ignored, since a broker file holds many others).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

_INT32_MAX = 2**31 - 1
# Settings that are comma-separated lists rather than numbers.
_LIST_FIELDS = frozenset({"group_consumer_assignors", "group_coordinator_rebalance_protocols"})
# Settings that are one word out of a fixed set (Kafka compares them ignoring case).
_CHOICE_FIELDS = frozenset({"group_consumer_migration_policy"})
REBALANCE_PROTOCOLS = frozenset({"classic", "consumer"})
# group.consumer.migration.policy: which online conversions between the protocols are allowed.
MIGRATION_POLICIES = frozenset({"bidirectional", "upgrade", "downgrade", "disabled"})
CONSUMER_ASSIGNORS = frozenset({"uniform", "range"})


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """Timeouts in milliseconds unless the Kafka name says otherwise."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = _INT32_MAX
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    group_new_member_join_timeout_ms: int = 300_000
    # KIP-848's consumer protocol (group.protocol=consumer clients).
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15000
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_min_session_timeout_ms: int = 45000
    group_consumer_max_session_timeout_ms: int = 60000
    group_consumer_max_size: int = _INT32_MAX
    # KIP-1263 (Kafka 4.3): a group's target assignment is recomputed at most once per
    # interval; members joining meanwhile reconcile towards the target as it was.
    group_consumer_assignment_interval_ms: int = 1000
    group_consumer_min_assignment_interval_ms: int = 0
    group_consumer_max_assignment_interval_ms: int = 15000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_regex_refresh_interval_ms: int = 600_000
    group_consumer_migration_policy: str = "bidirectional"
    # KIP-932's share groups.
    group_share_heartbeat_interval_ms: int = 5000
    group_share_session_timeout_ms: int = 45000
    group_share_max_size: int = 200
    group_share_assignment_interval_ms: int = 1000

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.name in _LIST_FIELDS | _CHOICE_FIELDS:
                continue
            if value < 0:
                raise ValueError(f"{property_name(spec.name)} must be >= 0, got {value}")
        if self.offsets_topic_num_partitions < 1:
            raise ValueError("offsets.topic.num.partitions must be >= 1")
        if self.group_max_size < 1:
            raise ValueError("group.max.size must be >= 1")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        self._check_consumer_settings()

    def _check_consumer_settings(self) -> None:
        """Kafka's checks (GroupCoordinatorConfig): bounds hold the values, the heartbeat
        interval is below the session timeout, and lists name only what exists."""
        for name, low, value, high in (
            ("heartbeat.interval.ms", self.group_consumer_min_heartbeat_interval_ms,
             self.group_consumer_heartbeat_interval_ms,
             self.group_consumer_max_heartbeat_interval_ms),
            ("session.timeout.ms", self.group_consumer_min_session_timeout_ms,
             self.group_consumer_session_timeout_ms, self.group_consumer_max_session_timeout_ms),
        ):
            if not low <= value <= high:
                raise ValueError(f"group.consumer.{name} must be within its min and max, got "
                                 f"{value} (min {low}, max {high})")
        interval = self.group_consumer_assignment_interval_ms
        if interval < self.group_consumer_min_assignment_interval_ms:
            raise ValueError("group.consumer.assignment.interval.ms must be greater than or equal"
                             " to group.consumer.min.assignment.interval.ms")
        if interval > self.group_consumer_max_assignment_interval_ms:
            raise ValueError("group.consumer.assignment.interval.ms must be less than or equal "
                             "to group.consumer.max.assignment.interval.ms")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be below "
                             "group.consumer.session.timeout.ms")
        if self.group_consumer_regex_refresh_interval_ms < 10_000:
            raise ValueError("group.consumer.regex.refresh.interval.ms must be >= 10000, got "
                             f"{self.group_consumer_regex_refresh_interval_ms}")
        if self.group_consumer_max_size < 1:
            raise ValueError("group.consumer.max.size must be >= 1")
        unknown = set(self.group_consumer_assignors) - CONSUMER_ASSIGNORS
        if unknown or not self.group_consumer_assignors:
            raise ValueError(f"group.consumer.assignors must name some of "
                             f"{sorted(CONSUMER_ASSIGNORS)}, got {self.group_consumer_assignors}")
        if self.group_consumer_migration_policy not in MIGRATION_POLICIES:
            raise ValueError(f"group.consumer.migration.policy must be one of "
                             f"{sorted(MIGRATION_POLICIES)}, got "
                             f"{self.group_consumer_migration_policy!r}")
        protocols = set(self.group_coordinator_rebalance_protocols)
        if protocols - REBALANCE_PROTOCOLS or "classic" not in protocols:
            raise ValueError("group.coordinator.rebalance.protocols must include classic and "
                             f"name only {sorted(REBALANCE_PROTOCOLS)}, got "
                             f"{self.group_coordinator_rebalance_protocols}")

    @property
    def consumer_protocol_enabled(self) -> bool:
        return "consumer" in self.group_coordinator_rebalance_protocols

    @property
    def online_upgrade_enabled(self) -> bool:
        """A live classic group may become a consumer group (a consumer-protocol member joins)."""
        return self.group_consumer_migration_policy in ("bidirectional", "upgrade")

    @property
    def online_downgrade_enabled(self) -> bool:
        """A consumer group whose last consumer-protocol member leaves may become classic."""
        return self.group_consumer_migration_policy in ("bidirectional", "downgrade")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> GroupCoordinatorConfig:
        """Build from Kafka-style `name=value` properties; a bad number names the property."""
        values: dict[str, object] = {}
        for spec in fields(cls):
            name = property_name(spec.name)
            if name in properties:
                raw = properties[name]
                if spec.name in _LIST_FIELDS:
                    items = (item.strip().lower() for item in raw.split(","))
                    values[spec.name] = tuple(item for item in items if item)
                    continue
                if spec.name in _CHOICE_FIELDS:
                    values[spec.name] = raw.strip().lower()
                    continue
                try:
                    values[spec.name] = int(raw.strip())
                except ValueError:
                    raise ValueError(f"{name} must be an integer, got {raw!r}") from None
        return cls(**values)  # type: ignore[arg-type]


def property_name(field_name: str) -> str:
    """`group_max_size` -> `group.max.size`: the Kafka spelling of a config field."""
    return field_name.replace("_", ".")
