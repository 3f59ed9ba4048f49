"""The broker's fast kio writer must produce exactly kio's bytes, for every version and shape."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.consumer_group_heartbeat.v0.response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from kgroups.broker.fast_writer import entity_encoder, uvarint
from kgroups.broker.wire import build, encode_response, response_type, sibling

NO_THROTTLE = datetime.timedelta(0)
names = st.text(max_size=12)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def _same_bytes(entity: Any) -> None:
    reference = io.BytesIO()
    entity_writer(type(entity))(reference, entity)
    fast: list[bytes] = []
    entity_encoder(type(entity))(entity, fast)
    assert b"".join(fast) == reference.getvalue()


@pytest.mark.parametrize("version", range(13))
@given(topic=names, host=names, partitions=st.lists(int32s, max_size=4), cluster=st.none() | names)
def test_metadata_every_version(version: int, topic: str, host: str, partitions: list[int],
                                cluster: str | None) -> None:
    cls = response_type(3, version)
    topic_cls = sibling(cls, "MetadataResponseTopic")
    partition_cls = sibling(cls, "MetadataResponsePartition")
    broker_cls = sibling(cls, "MetadataResponseBroker")
    _same_bytes(build(
        cls, throttle_time=NO_THROTTLE, cluster_id=cluster, controller_id=0,
        cluster_authorized_operations=-2147483648,
        brokers=(build(broker_cls, node_id=0, host=host, port=9092, rack=None),),
        topics=(build(topic_cls, error_code=ErrorCode.none, name=topic, topic_id=None,
                      is_internal=False, partitions=tuple(
                          build(partition_cls, error_code=ErrorCode.none, partition_index=p,
                                leader_id=0, leader_epoch=-1, replica_nodes=(0,), isr_nodes=(0,),
                                offline_replicas=()) for p in partitions)),)))


@pytest.mark.parametrize("version", range(4, 13))
@given(records=st.none() | st.binary(max_size=64), high_watermark=st.integers(0, 2**40),
       aborted=st.none() | st.just(()))
def test_fetch_every_version(version: int, records: bytes | None, high_watermark: int,
                             aborted: tuple[()] | None) -> None:
    cls = response_type(1, version)
    topic_cls = sibling(cls, "FetchableTopicResponse")
    partition_cls = sibling(cls, "PartitionData")
    _same_bytes(build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0,
                      responses=(build(topic_cls, topic="t", partitions=(build(
                          partition_cls, partition_index=0, error_code=ErrorCode.none,
                          high_watermark=high_watermark, last_stable_offset=high_watermark,
                          log_start_offset=0, aborted_transactions=aborted,
                          preferred_read_replica=-1, records=records),)),)))


@given(epoch=st.integers(-1, 2**40), keys=st.lists(st.integers(0, 80), max_size=3))
def test_tagged_fields_present_and_absent(epoch: int, keys: list[int]) -> None:
    cls = response_type(18, 3)
    key_cls = sibling(cls, "ApiVersion")
    _same_bytes(cls(error_code=ErrorCode.none, throttle_time=NO_THROTTLE,
                    api_keys=tuple(key_cls(api_key=k, min_version=0, max_version=1) for k in keys),
                    finalized_features_epoch=epoch))


@given(assigned=st.booleans(), member=st.none() | names)
def test_nullable_struct(assigned: bool, member: str | None) -> None:
    assignment = Assignment(topic_partitions=(TopicPartitions(topic_id=None, partitions=(1, 2)),))
    _same_bytes(ConsumerGroupHeartbeatResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        member_id=member, member_epoch=3, heartbeat_interval=datetime.timedelta(seconds=3),
        assignment=assignment if assigned else None))


@given(st.integers(min_value=0, max_value=2**63))
def test_uvarint_matches_kafka(value: int) -> None:
    encoded = uvarint(value)
    decoded = sum((byte & 0x7F) << (7 * i) for i, byte in enumerate(encoded))
    assert decoded == value
    assert all(byte & 0x80 for byte in encoded[:-1]) and not encoded[-1] & 0x80


@pytest.mark.parametrize(("api_key", "version"), [(12, 3), (12, 4), (18, 3)])
@given(correlation_id=int32s)
def test_response_frame_as_kio_writes_it(api_key: int, version: int, correlation_id: int) -> None:
    """Size prefix and response header (v0 for Heartbeat v3 and for every ApiVersions, v1 with
    its tagged-field section for Heartbeat v4) around the body, as kio's writers frame them."""
    cls = response_type(api_key, version)
    extra = {"api_keys": ()} if api_key == 18 else {}
    response = build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, **extra)
    header_cls = cls.__header_schema__
    expected = io.BytesIO()
    entity_writer(header_cls)(expected, header_cls(correlation_id=correlation_id))
    entity_writer(cls)(expected, response)
    framed = encode_response(correlation_id, response)
    assert framed[4:] == expected.getvalue()
    assert int.from_bytes(framed[:4], "big") == len(expected.getvalue())
