"""OffsetCommit answers kept encoded (`kept_answers`): a consumer committing the same partitions
again gets the bytes of the first answer again, in every version the broker serves, and an
answer saying something else (another error, another partition, another order) is never one
kept for a different request. Heartbeat answers, fixed by version and error, are kept too."""

from __future__ import annotations

import datetime
import itertools
import socket
import struct
from typing import Any

import pytest
from tests.broker.broker_wire_helpers import (
    await_commits,
    connect,
    create_topic,
    nested_of,
    request_of,
)

from kgroups.broker.kept_answers import KEPT_BYTES, KEPT_PARTITIONS
from kgroups.broker.wire import (
    NO_THROTTLE,
    build,
    encode_request,
    encode_response,
    kio_error,
    request_type,
    response_type,
    sibling,
)
from kgroups.errors import ErrorCode

OFFSET_COMMIT = 8
VERSIONS = range(2, 10)
TOPIC = "kept"
NONE, UNKNOWN = ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
_correlation_ids = itertools.count(1)


def _commit(version: int, group: str, topics: list[tuple[str, list[int]]],
            generation: int = -1) -> tuple[int, bytes]:
    commit = request_type(OFFSET_COMMIT, version)
    correlation_id = next(_correlation_ids)
    return correlation_id, encode_request(correlation_id, "kept-answers", build(
        commit, group_id=group, generation_id_or_member_epoch=generation, member_id="",
        group_instance_id=None, topics=tuple(build(
            sibling(commit, "OffsetCommitRequestTopic"), name=name, partitions=tuple(build(
                sibling(commit, "OffsetCommitRequestPartition"), partition_index=index,
                committed_offset=7, committed_leader_epoch=-1, committed_metadata="")
                for index in indexes)) for name, indexes in topics)))


def _expected(version: int, correlation_id: int,
              said: list[tuple[str, list[tuple[int, ErrorCode]]]]) -> bytes:
    """The frame kio writes for an answer saying `said`."""
    response = response_type(OFFSET_COMMIT, version)
    return encode_response(correlation_id, build(
        response, throttle_time=NO_THROTTLE, topics=tuple(build(
            sibling(response, "OffsetCommitResponseTopic"), name=name, partitions=tuple(build(
                sibling(response, "OffsetCommitResponsePartition"), partition_index=index,
                error_code=kio_error(error)) for index, error in partitions))
            for name, partitions in said)))


def _exchange(sock: socket.socket, request: tuple[int, bytes]) -> bytes:
    sock.sendall(request[1])
    reader = sock.makefile("rb")
    head = reader.read(4)
    (size,) = struct.unpack(">i", head)
    return head + reader.read(size)


@pytest.fixture
def broker_port(inprocess_broker: Any) -> int:
    with connect(inprocess_broker.port) as admin:
        create_topic(admin, TOPIC, 2)
    port: int = inprocess_broker.port
    return port


def test_every_version_repeats_the_bytes_kio_writes(broker_port: int) -> None:
    """Known and unknown partitions (an index past the topic's two, a topic that does not
    exist) in one request, three times per version: each answer is kio's frame for what it
    says, in request order, with its own correlation id."""
    asked = [(TOPIC, [1, 5, 0]), ("no-such-topic", [0])]
    said = [(TOPIC, [(1, NONE), (5, UNKNOWN), (0, NONE)]), ("no-such-topic", [(0, UNKNOWN)])]
    with socket.create_connection(("127.0.0.1", broker_port), timeout=30) as sock:
        await_commits(broker_port, [f"group-v{version}" for version in VERSIONS], TOPIC)
        for version in VERSIONS:
            for _ in range(3):
                sent = _commit(version, f"group-v{version}", asked)
                assert _exchange(sock, sent) == _expected(version, sent[0], said), version


def test_an_answer_saying_something_else_is_not_a_kept_one(broker_port: int) -> None:
    """After NONE answers for a group's partitions: the same partitions refused (a generation
    the group never had), the same partitions in another order, and a request naming more
    partitions than answers are kept for, each answered for itself."""
    with socket.create_connection(("127.0.0.1", broker_port), timeout=30) as sock:
        await_commits(broker_port, ["kept-then-refused"], TOPIC)
        for version in (8, 9):
            asked = [(TOPIC, [0, 1])]
            sent = _commit(version, "kept-then-refused", asked)
            assert _exchange(sock, sent) == _expected(
                version, sent[0], [(TOPIC, [(0, NONE), (1, NONE)])])
            refused = (ErrorCode.GROUP_ID_NOT_FOUND if version >= 9
                       else ErrorCode.ILLEGAL_GENERATION)
            sent = _commit(version, "no-such-group", asked, generation=5)
            assert _exchange(sock, sent) == _expected(
                version, sent[0], [(TOPIC, [(0, refused), (1, refused)])])
            sent = _commit(version, "kept-then-refused", [(TOPIC, [1, 0])])
            assert _exchange(sock, sent) == _expected(
                version, sent[0], [(TOPIC, [(1, NONE), (0, NONE)])])
            many = list(range(KEPT_PARTITIONS + 1))
            for _ in range(2):
                sent = _commit(version, "kept-then-refused", [(TOPIC, many)])
                assert _exchange(sock, sent) == _expected(version, sent[0], [(TOPIC, [
                    (index, NONE if index < 2 else UNKNOWN) for index in many])])


def test_answers_naming_long_topics_keep_the_store_bounded(
    inprocess_broker: Any, broker_port: int,
) -> None:
    """A client naming ever new topics of 20,000 characters (unknown: each answered
    UNKNOWN_TOPIC_OR_PARTITION, each answer ~160 kB): every answer is still right, and the
    answers kept never hold more than KEPT_BYTES, whatever the count."""
    kept = inprocess_broker.broker.commit_answers
    with socket.create_connection(("127.0.0.1", broker_port), timeout=30) as sock:
        await_commits(broker_port, ["long-names"], TOPIC)
        for round_ in range(40):
            names = [f"{round_:02d}-{index}-" + "x" * 20_000 for index in range(8)]
            sent = _commit(9, "long-names", [(name, [0]) for name in names])
            assert _exchange(sock, sent) == _expected(
                9, sent[0], [(name, [(0, UNKNOWN)]) for name in names])
            assert kept.size_bytes <= KEPT_BYTES
    assert KEPT_BYTES < 40 * 8 * 20_000  # enough was asked to pass the bound


HEARTBEAT = 12


def _heartbeat(version: int, group: str, generation: int, member_id: str) -> tuple[int, bytes]:
    correlation_id = next(_correlation_ids)
    return correlation_id, encode_request(correlation_id, "kept-answers", build(
        request_type(HEARTBEAT, version), group_id=group, generation_id=generation,
        member_id=member_id, group_instance_id=None))


def _heartbeat_expected(version: int, correlation_id: int, error: ErrorCode) -> bytes:
    return encode_response(correlation_id, build(
        response_type(HEARTBEAT, version), throttle_time=NO_THROTTLE,
        error_code=kio_error(error)))


def _one_member_group(port: int, group: str) -> tuple[str, int]:
    """A Stable classic group of one member: (member id, generation)."""
    with connect(port) as client:
        for _ in range(600):
            joined = client.call(request_of(
                11, 3, group_id=group, session_timeout=datetime.timedelta(seconds=30),
                rebalance_timeout=datetime.timedelta(seconds=30), member_id="",
                protocol_type="consumer", protocols=(nested_of(
                    11, 3, "JoinGroupRequestProtocol", name="range", metadata=b""),)))
            if joined.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                break
        assert joined.error_code == ErrorCode.NONE
        synced = client.call(request_of(
            14, 3, group_id=group, generation_id=joined.generation_id,
            member_id=joined.member_id, group_instance_id=None, assignments=()))
        assert synced.error_code == ErrorCode.NONE
    return joined.member_id, int(joined.generation_id)


def test_heartbeat_answers_are_kios_bytes_for_each_version_and_error(broker_port: int) -> None:
    """Heartbeats of every version answered in turn with different errors (none, a generation
    the group is past, a member it does not have), twice each: each answer is kio's frame for
    its own version, error and correlation id, never one kept for another request."""
    member_id, generation = _one_member_group(broker_port, "beating")
    cases = [(generation, member_id, ErrorCode.NONE),
             (generation + 1, member_id, ErrorCode.ILLEGAL_GENERATION),
             (generation, "nobody", ErrorCode.UNKNOWN_MEMBER_ID)]
    with socket.create_connection(("127.0.0.1", broker_port), timeout=30) as sock:
        for _ in range(2):
            for version in range(5):
                for sent_generation, sent_member, error in cases:
                    sent = _heartbeat(version, "beating", sent_generation, sent_member)
                    assert _exchange(sock, sent) == _heartbeat_expected(
                        version, sent[0], error), (version, error)
