"""Offset commits and fetches of a streams group's members, checked as Kafka 4.3.1's
StreamsGroup checks them: with the member epoch, and (an older epoch) per task.

A commit without a member epoch is taken only while the group has no members (an admin tool
resetting offsets); otherwise the member must exist, commit with OffsetCommit v9+ (TxnOffsetCommit
has no such floor) and send its member epoch, or an older one no older than the epoch each
committed partition's task was assigned to it at (the task must still be assigned to it or
pending revocation). A partition maps to the task of the subtopology reading that topic, whose
partition number it is.
"""

from __future__ import annotations

from kgroups.coordinator.group import ClassicGroup
from kgroups.coordinator.messages import OffsetCommitRequest, TxnOffsetCommitRequest
from kgroups.coordinator.streams_group import StreamsGroup
from kgroups.errors import ErrorCode


def validate_streams_commit(
    group: ClassicGroup, req: OffsetCommitRequest | TxnOffsetCommitRequest
) -> ErrorCode | None:
    streams = group.streams
    assert streams is not None
    if req.generation_id < 0 and not streams.members:
        return None
    member = streams.members.get(req.member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    transactional = isinstance(req, TxnOffsetCommitRequest)
    if isinstance(req, OffsetCommitRequest) and req.version < 9:
        return ErrorCode.UNSUPPORTED_VERSION
    stale = ErrorCode.ILLEGAL_GENERATION if transactional else ErrorCode.STALE_MEMBER_EPOCH
    epoch = req.generation_id
    if epoch == member.member_epoch:
        return None
    if epoch > member.member_epoch:
        return stale
    readers = _readers(streams)
    pending = member.pending_revocation.active
    for topic in req.topics:
        for part in topic.partitions:
            tasks = [(sub, part.partition) for sub in readers.get(topic.name, ())]
            if not any((task in member.active_epochs and member.active_epochs[task] <= epoch)
                       or task[1] in pending.get(task[0], frozenset()) for task in tasks):
                return stale
    return None


def validate_streams_fetch(
    streams: StreamsGroup, member_id: str | None, member_epoch: int
) -> ErrorCode | None:
    """No member id and no epoch (an admin client) is answered; otherwise the member must exist
    and send its member epoch."""
    if member_id is None and member_epoch < 0:
        return None
    member = streams.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return None


def _readers(streams: StreamsGroup) -> dict[str, list[str]]:
    """Topic -> the subtopologies that read it (source or repartition source)."""
    readers: dict[str, list[str]] = {}
    if streams.topology is None:
        return readers
    for sub in streams.topology.subtopologies:
        for name in (*sub.source_topics, *(t.name for t in sub.repartition_source_topics)):
            readers.setdefault(name, []).append(sub.subtopology_id)
    return readers
