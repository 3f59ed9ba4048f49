"""ShareFetch / ShareAcknowledge v2 requests for one topic, and their responses reduced to what
a transcript compares: per partition the errors, the log batches' offset ranges and the
acquired ranges with delivery counts."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kgroups.broker.wire import build, request_type, sibling
from kgroups.errors import ErrorCode
from kgroups.log.batch import iter_batches

VERSION = 2
Acks = Mapping[int, Sequence[tuple[int, int, Sequence[int]]]]  # partition -> (first, last, types)


def _nested(api_key: int, name: str, **fields: Any) -> Any:
    return build(sibling(request_type(api_key, VERSION), name), **fields)


def _ack_batches(api_key: int,
                 batches: Sequence[tuple[int, int, Sequence[int]]]) -> tuple[Any, ...]:
    return tuple(_nested(api_key, "AcknowledgementBatch", first_offset=first, last_offset=last,
                         acknowledge_types=tuple(types)) for first, last, types in batches)


def share_fetch(group: str, member: str, epoch: int, topic_id: uuid.UUID, *,
                partitions: Sequence[int] = (0,), acks: Acks | None = None, wait_ms: int = 0,
                max_records: int = 500, batch_size: int = 500, mode: int = 0, min_bytes: int = 1,
                renew: bool = False, forget: Sequence[int] = ()) -> Any:
    acks = acks or {}
    wanted = list(dict.fromkeys([*partitions, *acks]))
    topics = (_nested(78, "FetchTopic", topic_id=topic_id, partitions=tuple(
        _nested(78, "FetchPartition", partition_index=p,
                acknowledgement_batches=_ack_batches(78, acks.get(p, ()))) for p in wanted)),
              ) if wanted else ()
    forgotten = (_nested(78, "ForgottenTopic", topic_id=topic_id, partitions=tuple(forget)),
                 ) if forget else ()
    return build(request_type(78, VERSION), group_id=group, member_id=member,
                 share_session_epoch=epoch, max_wait=datetime.timedelta(milliseconds=wait_ms),
                 min_bytes=min_bytes, max_bytes=1 << 20, max_records=max_records,
                 batch_size=batch_size,
                 share_acquire_mode=mode, is_renew_ack=renew, topics=topics,
                 forgotten_topics_data=forgotten)


def share_acknowledge(group: str, member: str, epoch: int, topic_id: uuid.UUID, acks: Acks,
                      renew: bool = False) -> Any:
    return build(request_type(79, VERSION), group_id=group, member_id=member,
                 share_session_epoch=epoch, is_renew_ack=renew,
                 topics=(_nested(79, "AcknowledgeTopic", topic_id=topic_id, partitions=tuple(
                     _nested(79, "AcknowledgePartition", partition_index=p,
                             acknowledgement_batches=_ack_batches(79, batches))
                     for p, batches in acks.items())),))


def brief(response: Any) -> dict[str, Any]:
    """The response without topic ids (they differ between brokers)."""
    partitions = []
    for topic in response.responses:
        for p in topic.partitions:
            entry: dict[str, Any] = {"partition": p.partition_index,
                                     "error": int(p.error_code), "message": p.error_message}
            if hasattr(p, "acquired_records"):
                entry.update(
                    ack_error=p.acknowledge_error_code, ack_message=p.acknowledge_error_message,
                    batches=[(b.base_offset, b.base_offset + b.last_offset_delta)
                             for b in iter_batches(p.records or b"")],
                    acquired=[(a.first_offset, a.last_offset, a.delivery_count)
                              for a in p.acquired_records])
            partitions.append(entry)
    return {"error": int(response.error_code), "message": response.error_message,
            "lock_ms": response.acquisition_lock_timeout.total_seconds() * 1000,
            "partitions": partitions}


def join_share_group(client: Any, group: str, member: str, topic: str) -> None:
    """ShareGroupHeartbeat (v1) until `member` is assigned a partition of `topic`: by then the
    group coordinator has initialized the share partitions, which ShareFetch needs."""
    epoch, deadline = 0, time.monotonic() + 30
    while True:
        response = client.call(build(
            request_type(76, 1), group_id=group, member_id=member, member_epoch=epoch,
            rack_id=None, subscribed_topic_names=(topic,) if epoch == 0 else None))
        if int(response.error_code) == ErrorCode.NONE:
            epoch = int(response.member_epoch)
            if response.assignment is not None and response.assignment.topic_partitions:
                return
        else:
            assert int(response.error_code) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, response
        assert time.monotonic() < deadline, "never assigned"
        time.sleep(0.05)
