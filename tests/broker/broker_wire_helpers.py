"""Small builders of kio requests and raw-socket helpers shared by the broker's own tests."""

from __future__ import annotations

import datetime
import socket
import struct
from collections.abc import Sequence
from typing import Any

from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.fetch.v12 import request as fetch
from kio.schema.list_offsets.v6 import request as list_offsets
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v9 import request as produce

from kgroups.broker.wire import (
    build,
    decode_response,
    encode_request,
    request_type,
    response_type,
    sibling,
)
from kgroups.tools.wire_client import KafkaWireClient


def request_of(api_key: int, version: int, **fields: Any) -> Any:
    """The kio request of that API version, with the fields the version has."""
    return build(request_type(api_key, version), **fields)


def nested_of(api_key: int, version: int, class_name: str, **fields: Any) -> Any:
    """A struct inside that API version's request (e.g. "OffsetCommitRequestTopic")."""
    return build(sibling(request_type(api_key, version), class_name), **fields)


def connect(port: int) -> KafkaWireClient:
    return KafkaWireClient("127.0.0.1", port, client_id="broker-tests", timeout=15)


def create_topic(client: KafkaWireClient, name: str, partitions: int = 1,
                 replication: int = 1, validate_only: bool = False,
                 configs: dict[str, str] | None = None) -> object:
    entries = tuple(create_topics.CreatableTopicConfig(name=key, value=value)
                    for key, value in (configs or {}).items())
    request = create_topics.CreateTopicsRequest(
        topics=(create_topics.CreatableTopic(name=name, num_partitions=partitions,
                                             replication_factor=replication, assignments=(),
                                             configs=entries),),
        timeout=datetime.timedelta(seconds=5), validate_only=validate_only)
    (result,) = client.call(request).topics
    return result


def standalone_commits(groups: Sequence[str], topic: str, first_offset: int = 0,
                       version: int = 8) -> bytes:
    """One OffsetCommit frame per entry of `groups` (no member: standalone groups; a group may
    repeat), partition 0 of `topic`, offsets counting up from `first_offset`, correlation ids
    from 1."""
    commit = request_type(8, version)
    return b"".join(encode_request(index + 1, "broker-tests", build(
        commit, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(build(
            sibling(commit, "OffsetCommitRequestTopic"), name=topic, partitions=(build(
                sibling(commit, "OffsetCommitRequestPartition"), partition_index=0,
                committed_offset=first_offset + index, committed_leader_epoch=-1,
                committed_metadata=""),)),))) for index, group in enumerate(groups))


def commit_errors(sock: socket.socket, count: int, version: int = 8) -> list[int]:
    """The error code of each of `count` single-partition OffsetCommit answers, in order."""
    reader = sock.makefile("rb")
    codes = []
    for _ in range(count):
        (size,) = struct.unpack(">i", reader.read(4))
        answer = decode_response(response_type(8, version), reader.read(size))[1]
        codes.append(int(answer.topics[0].partitions[0].error_code))
    return codes


def await_commits(port: int, groups: Sequence[str], topic: str) -> None:
    """Until a standalone commit of each group to `topic` is answered NONE: the groups'
    __consumer_offsets partitions are loaded (COORDINATOR_LOAD_IN_PROGRESS before)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for _ in range(600):
            sock.sendall(standalone_commits(groups, topic))
            if set(commit_errors(sock, len(groups))) == {0}:
                return
    raise AssertionError("the coordinator never finished loading")


def metadata_request(*topics: str, auto_create: bool = True,
                     all_topics: bool = False) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(
        topics=None if all_topics else tuple(
            metadata.MetadataRequestTopic(topic_id=None, name=name) for name in topics),
        allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False)


def produce_request(topic: str, partition: int, records: bytes,
                    acks: int = -1) -> produce.ProduceRequest:
    return produce.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=partition, records=records),)),))


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
                  min_bytes: int = 1, max_bytes: int = 1 << 20) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(fetch.FetchTopic(topic=topic, partitions=(
            fetch.FetchPartition(partition=partition, current_leader_epoch=-1,
                                 fetch_offset=offset, last_fetched_epoch=-1,
                                 log_start_offset=-1, partition_max_bytes=max_bytes),)),),
        forgotten_topics_data=(), rack_id="")


def list_offsets_request(topic: str, partition: int,
                         timestamp: int) -> list_offsets.ListOffsetsRequest:
    return list_offsets.ListOffsetsRequest(
        replica_id=-1, isolation_level=0,
        topics=(list_offsets.ListOffsetsTopic(name=topic, partitions=(
            list_offsets.ListOffsetsPartition(partition_index=partition,
                                              current_leader_epoch=-1,
                                              timestamp=timestamp),)),))


def raw_socket(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("closed by the broker")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def is_closed_by_peer(sock: socket.socket) -> bool:
    """True when the broker has closed the connection (EOF or reset), within the socket timeout."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def send_and_decode(sock: socket.socket, correlation_id: int, request: object) -> object:
    sock.sendall(encode_request(correlation_id, "raw", request))
    schema = response_type(int(request.__api_key__), int(request.__version__))  # type: ignore[attr-defined]
    answered, body = decode_response(schema, read_frame(sock))
    assert answered == correlation_id
    return body
