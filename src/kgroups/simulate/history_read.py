"""One group's history as the pipeline reads it, for `kgroups simulate --from-history`.

The group's __consumer_offsets partition is found as Kafka places it (`partition_for`, when the
whole topic is there; every partition found otherwise) and analysed in this process by the
pipeline (`pipeline.group_log`): its generations, rebalance causes and commits are what
`kgroups analyze` reports for the group. What the generation table leaves out and the schedule
needs, each member's session and rebalance timeouts, comes from the same decoded records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from kgroups.coordinator.placement import partition_for
from kgroups.pipeline.consumer_history import DEFAULT_SESSION_TIMEOUT_MS
from kgroups.pipeline.discovery import InputNotFoundError
from kgroups.pipeline.group_log import OffsetsLog, PartitionRead
from kgroups.records.consumer_group import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
)


class HistoryError(ValueError):
    """The history cannot be read or holds no such group; the message is one line."""


@dataclass(frozen=True, slots=True)
class GroupHistory:
    """What the log says of one group, in log order."""

    source: str
    group: str
    generations: list[dict[str, Any]]  # group_generations rows (epoch-ms ts)
    causes: list[dict[str, Any]]  # rebalance_causes rows
    timeouts: dict[str, tuple[int, int]]  # member id -> (session, rebalance) timeout, ms
    topics: dict[str, int]  # the topics the group used -> partition count
    commits: int  # offset commit records inside the history
    last_commit_ms: int | None

    @property
    def group_type(self) -> str:
        return str(self.generations[-1]["group_type"])


def read_history(source: str, group: str) -> GroupHistory:
    try:
        log = OffsetsLog.open(source)
    except InputNotFoundError as error:
        raise HistoryError(str(error)) from None
    except OSError as error:  # an unreachable store, an unreadable directory
        raise HistoryError(str(error)) from None
    try:
        if log.partition_count is not None:
            candidates = [partition_for(group, log.partition_count)]
        else:
            candidates = list(log.partitions)
        for log_partition in candidates:
            read = log.read(log_partition)
            found = _group_history(log, read, group)
            if found is not None:
                return found
        raise HistoryError(f"no group {group!r} with a generation in {log.described}"
                           + _known(read, candidates))
    except OSError as error:
        raise HistoryError(str(error)) from None
    finally:
        log.close()


def _known(read: PartitionRead, candidates: list[int]) -> str:
    if len(candidates) != 1:
        return ""
    groups = sorted({str(g) for g in read.result.group_generations["group"].to_pylist()})
    shown = ", ".join(groups[:5]) + (", ..." if len(groups) > 5 else "")
    return (f" (its partition, __consumer_offsets-{candidates[0]}, has "
            + (f"generations of: {shown})" if groups else "no group generations)"))


def _group_history(log: OffsetsLog, read: PartitionRead, group: str) -> GroupHistory | None:
    result = read.result
    generations = [row for row in result.group_generations.to_pylist() if row["group"] == group]
    if not generations:
        return None
    generations.sort(key=lambda r: (r["log_partition"], r["log_offset"]))
    for row in generations:
        row["ts"] = _ms(row["ts"])
    causes = [row for row in result.rebalance_causes.to_pylist() if row["group"] == group]
    for row in causes:
        row["ts"] = _ms(row["ts"])
    minutes = result.commit_minutes.filter(pc.equal(result.commit_minutes["group"], group))
    last = pc.max(minutes["last_commit_ts"]).as_py() if minutes.num_rows else None
    return GroupHistory(
        source=log.described, group=group, generations=generations, causes=causes,
        timeouts=_timeouts(read, group), topics=_topics(log, generations),
        commits=int(pc.sum(minutes["commits"]).as_py() or 0) if minutes.num_rows else 0,
        last_commit_ms=None if last is None else _ms(last))


def _ms(value: Any) -> int:
    """An epoch-ms int from a TIMESTAMP column's Python value (a datetime)."""
    return value if isinstance(value, int) else int(value.timestamp() * 1000)


def _timeouts(read: PartitionRead, group: str) -> dict[str, tuple[int, int]]:
    """Each member id's session and rebalance timeouts: a classic member's from its group's
    GroupMetadata records; a consumer-protocol member's session timeout is the broker's
    (Kafka's default taken), its rebalance timeout from its member metadata record."""
    found: dict[str, tuple[int, int]] = {}
    records = read.group_records
    own = records.filter(pc.equal(records["group"], group)).to_pylist()
    for row in own:
        for member in row["members"] or ():
            found[member["member_id"]] = (int(member["session_timeout"]),
                                          int(member["rebalance_timeout"]))
    for record in read.consumer_records:
        if isinstance(record.key, ConsumerGroupMemberMetadataKey) \
                and record.key.group == group \
                and isinstance(record.value, ConsumerGroupMemberMetadataValue):
            found[record.key.member_id] = (DEFAULT_SESSION_TIMEOUT_MS,
                                           int(record.value.rebalance_timeout_ms))
    return found


def _topics(log: OffsetsLog, generations: list[dict[str, Any]]) -> dict[str, int]:
    """The topics the group subscribed to or was assigned, each with its partition count: the
    topic's own log where it is beside __consumer_offsets, else one more than the highest
    partition any generation assigned."""
    counts: dict[str, int] = {}
    for row in generations:
        for member in row["members"] or ():
            for topic in member["topics"] or ():
                counts.setdefault(str(topic), 0)
            for assigned in member["partitions"] or ():
                topic = str(assigned["topic"])
                counts[topic] = max(counts.get(topic, 0), int(assigned["partition"]) + 1)
    return {topic: max(count, log.topic_partitions.get(topic, 0))
            for topic, count in sorted(counts.items())
            if max(count, log.topic_partitions.get(topic, 0)) > 0}
