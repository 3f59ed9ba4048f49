"""Group coordinator settings, under Kafka's broker property names and with Kafka's defaults.

Operators already know these names from `server.properties`; keeping them lets a Kafka config
file drive kgroups unchanged (unknown keys are ignored, since a broker file holds many others).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

_INT32_MAX = 2**31 - 1


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

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
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

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> GroupCoordinatorConfig:
        """Build from Kafka-style `name=value` properties; a bad number names the property."""
        values: dict[str, int] = {}
        for spec in fields(cls):
            name = property_name(spec.name)
            if name in properties:
                raw = properties[name]
                try:
                    values[spec.name] = int(raw.strip())
                except ValueError:
                    raise ValueError(f"{name} must be an integer, got {raw!r}") from None
        return cls(**values)


def property_name(field_name: str) -> str:
    """`group_max_size` -> `group.max.size`: the Kafka spelling of a config field."""
    return field_name.replace("_", ".")
