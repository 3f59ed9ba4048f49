"""Whole Metadata answers kept encoded: a client refreshing the same topics gets the bytes of
the first answer again, as long as nothing that answer says has changed. Every change of the
topics (created, deleted, grown, deleted and created again with a new id) must be seen by the
next request; an answer depends on the listener it is asked on; and nothing is kept where an
answer may change without the topics changing (an authorizer's ACLs, a topic not found)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.broker.broker_wire_helpers import nested_of, request_of
from tests.broker.test_metadata_answer import (
    AUTHORIZER,
    METADATA,
    VERSIONS,
    FakeSession,
    kio_bytes,
    topics_broker,
    uncached_metadata,
)

from kgroups.broker.apis.contract import RequestContext
from kgroups.broker.broker import Broker
from kgroups.broker.wire import encode_response

ALICE = FakeSession("User:alice")


def asked(version: int, broker: Broker) -> list[Any]:
    """Requests whose topics all exist: every topic, two by name, one by id (v12)."""
    def topic(**fields: Any) -> Any:
        return nested_of(METADATA, version, "MetadataRequestTopic", **fields)

    flags = {"allow_auto_topic_creation": False,
             "include_cluster_authorized_operations": version >= 8,
             "include_topic_authorized_operations": version >= 8}
    requests = [request_of(METADATA, version, topics=() if version == 0 else None, **flags),
                request_of(METADATA, version, topics=(
                    topic(name="beta", topic_id=None), topic(name="gamma", topic_id=None)),
                    **flags)]
    if version >= 12:
        requests.append(request_of(METADATA, version, topics=(
            topic(name=None, topic_id=broker.logs.topic_id("gamma")),), **flags))
    return requests


def answer(broker: Broker, version: int, request: Any,
           session: FakeSession = ALICE) -> tuple[Any, bytes, bytes]:
    """The handler's answer, its bytes, and the bytes kio writes for the catalog as it is."""
    handler = broker.registry.get(METADATA)
    assert handler is not None
    ctx = RequestContext(METADATA, version, 7, "test", "127.0.0.1", broker,
                         session)  # type: ignore[arg-type]

    async def both() -> tuple[Any, bytes, bytes]:
        served = await handler(ctx, request)
        reference = await uncached_metadata(ctx, request)
        return served, encode_response(7, served), kio_bytes(7, reference)

    return asyncio.run(both())


def test_a_repeated_request_is_answered_from_one_encoded_answer(tmp_path: Path) -> None:
    broker = topics_broker(tmp_path)
    for version in VERSIONS:
        for request in asked(version, broker):
            first, first_bytes, expected = answer(broker, version, request)
            again, again_bytes, _ = answer(broker, version, request)
            assert again is first, f"v{version} not kept: {request}"
            assert first_bytes == again_bytes == expected, f"v{version}: {request}"
    assert broker.metadata_entries.answers > 0


CHANGES: dict[str, Callable[[Broker], Any]] = {
    "created": lambda broker: broker.topics.create("delta", 2),
    "grown": lambda broker: broker.topics.add_partitions("beta", 5),
    "deleted": lambda broker: broker.topics.delete("beta"),
    "created again": lambda broker: (broker.topics.delete("gamma"),
                                     broker.topics.create("gamma", 2)),
}


def test_every_change_of_the_topics_is_in_the_next_answer(tmp_path: Path) -> None:
    for change, make in CHANGES.items():
        broker = topics_broker(tmp_path / change.replace(" ", "-"))
        version = 12
        everything = asked(version, broker)[0]
        gamma_by_id = asked(version, broker)[2]
        before = {id(r): answer(broker, version, r)[1] for r in (everything, gamma_by_id)}
        gamma_id = broker.logs.topic_id("gamma")
        make(broker)
        assert broker.metadata_entries.answers == 0, change
        _, after, expected = answer(broker, version, everything)
        assert after == expected and after != before[id(everything)], change
        if broker.logs.topic_id("gamma") != gamma_id:  # the old id is unknown now
            _, after, expected = answer(broker, version, gamma_by_id)
            assert after == expected and after != before[id(gamma_by_id)], change


def test_each_listener_gets_its_own_address(tmp_path: Path) -> None:
    broker = topics_broker(tmp_path)
    request = asked(12, broker)[0]
    inside = FakeSession("User:alice", ("10.0.0.1", 9092))
    outside = FakeSession("User:alice", ("broker.example.com", 19092))
    _, inside_bytes, inside_expected = answer(broker, 12, request, inside)
    _, outside_bytes, outside_expected = answer(broker, 12, request, outside)
    assert inside_bytes == inside_expected and outside_bytes == outside_expected
    assert inside_bytes != outside_bytes
    assert answer(broker, 12, request, inside)[1] == inside_expected


def test_nothing_is_kept_behind_an_authorizer_or_for_a_topic_not_found(tmp_path: Path) -> None:
    guarded = topics_broker(tmp_path / "guarded", f"authorizer.class.name={AUTHORIZER}",
                            "super.users=User:alice")
    for request in asked(12, guarded):
        answer(guarded, 12, request)
        answer(guarded, 12, request)
    assert guarded.metadata_entries.answers == 0
    broker = topics_broker(tmp_path / "open")
    missing = request_of(METADATA, 12, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False, topics=(
                             nested_of(METADATA, 12, "MetadataRequestTopic", name="beta",
                                       topic_id=None),
                             nested_of(METADATA, 12, "MetadataRequestTopic", name=None,
                                       topic_id=uuid.UUID(int=7))))
    _, served, expected = answer(broker, 12, missing)
    assert served == expected
    assert broker.metadata_entries.answers == 0
