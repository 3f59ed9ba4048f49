"""The settings Kafka 4.3.1 describes for a GROUP config resource (DescribeConfigs resource
type 32, as librdkafka's admin API and `kafka-configs --entity-type groups --describe` ask).

Kafka lets each group override a few of the broker's group.* settings; kgroups keeps no
per-group settings, so every group shows the broker's: the group.* setting given at start-up,
else Kafka's default, with the synonyms Kafka lists (docs/compatibility.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupSetting:
    type: str  # Kafka's ConfigDef type: INT, STRING or BOOLEAN
    broker_synonym: str  # the broker setting it defaults to
    default: str  # Kafka 4.3.1's default of that broker setting


GROUP_SETTINGS: Mapping[str, GroupSetting] = {
    "consumer.session.timeout.ms": GroupSetting(
        "INT", "group.consumer.session.timeout.ms", "45000"),
    "consumer.heartbeat.interval.ms": GroupSetting(
        "INT", "group.consumer.heartbeat.interval.ms", "5000"),
    "consumer.assignment.interval.ms": GroupSetting(
        "INT", "group.consumer.assignment.interval.ms", "1000"),
    "share.auto.offset.reset": GroupSetting("STRING", "share.auto.offset.reset", "latest"),
    "share.renew.acknowledge.enable": GroupSetting(
        "BOOLEAN", "share.renew.acknowledge.enable", "true"),
    "share.session.timeout.ms": GroupSetting("INT", "group.share.session.timeout.ms", "45000"),
    "share.heartbeat.interval.ms": GroupSetting(
        "INT", "group.share.heartbeat.interval.ms", "5000"),
    "share.delivery.count.limit": GroupSetting("INT", "group.share.delivery.count.limit", "5"),
    "share.record.lock.duration.ms": GroupSetting(
        "INT", "group.share.record.lock.duration.ms", "30000"),
    "share.assignment.interval.ms": GroupSetting(
        "INT", "group.share.assignment.interval.ms", "1000"),
    "share.isolation.level": GroupSetting("STRING", "share.isolation.level", "read_uncommitted"),
    "share.partition.max.record.locks": GroupSetting(
        "INT", "group.share.partition.max.record.locks", "2000"),
    "streams.initial.rebalance.delay.ms": GroupSetting(
        "INT", "group.streams.initial.rebalance.delay.ms", "3000"),
    "streams.assignment.interval.ms": GroupSetting(
        "INT", "group.streams.assignment.interval.ms", "1000"),
    "streams.heartbeat.interval.ms": GroupSetting(
        "INT", "group.streams.heartbeat.interval.ms", "5000"),
    "streams.session.timeout.ms": GroupSetting(
        "INT", "group.streams.session.timeout.ms", "45000"),
    "streams.num.standby.replicas": GroupSetting(
        "INT", "group.streams.num.standby.replicas", "0"),
}


def group_setting(supplied: Mapping[str, str], key: str) -> str:
    """A group config's value for every group: its broker setting if given, else the default."""
    setting = GROUP_SETTINGS[key]
    return supplied.get(setting.broker_synonym, setting.default)


# What the broker's share partitions read (broker/share_partitions.py), every group's the same:
# known settings (config.known_settings), not warned about as unused.
SHARE_MAX_SESSIONS = "group.share.max.share.sessions"
SHARE_MAX_SESSIONS_DEFAULT = "2000"
SHARE_GROUP_CONFIGS = ("share.record.lock.duration.ms", "share.delivery.count.limit",
                       "share.partition.max.record.locks", "share.isolation.level",
                       "share.auto.offset.reset", "share.renew.acknowledge.enable")
SHARE_PARTITION_SETTINGS = frozenset({
    SHARE_MAX_SESSIONS, *(GROUP_SETTINGS[key].broker_synonym for key in SHARE_GROUP_CONFIGS)})
