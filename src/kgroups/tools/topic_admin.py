"""Topic administration over the Kafka wire, the operations behind `kgroups topics`.

Like `admin` for groups, these ask the broker through the public APIs kafka-topics uses
(CreateTopics, Metadata, DescribeConfigs, CreatePartitions, DeleteTopics, DeleteRecords as
kafka-delete-records, plus ListOffsets for the log start and end kgroups adds to a
description), so they work against any Kafka-compatible broker and show what clients see.
"""

from __future__ import annotations

import base64
import datetime
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.wire import build, request_type, sibling
from kgroups.errors import ErrorCode
from kgroups.tools.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AdminError, list_offsets
from kgroups.tools.wire_client import KafkaWireClient

TOPIC_RESOURCE = 2
TOPIC_CONFIG_SOURCE = 1  # DescribeConfigs: set on the topic itself (Kafka's DYNAMIC_TOPIC_CONFIG)
_TIMEOUT = datetime.timedelta(seconds=30)


@dataclass(frozen=True, slots=True, order=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int | None
    log_end_offset: int | None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str | None  # None when the broker does not give one (older Metadata, or zero)
    internal: bool
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str]  # the settings made on the topic itself, as kafka-topics shows

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def _version(client: KafkaWireClient, api_key: int, highest: int, name: str) -> int:
    advertised = client.api_versions.get(api_key)
    if advertised is None or advertised.min_version > highest:
        raise AdminError(f"broker {client.host}:{client.port} does not support {name}")
    return min(highest, advertised.max_version)


def _failed(code: int, message: str | None, what: str) -> AdminError:
    """The broker's own message when it gives one (what kafka-topics prints), else the code."""
    return AdminError(message or f"{what}: {ErrorCode(code).name}")


def create_topic(client: KafkaWireClient, name: str, partitions: int | None,
                 configs: dict[str, str], replication_factor: int | None = None) -> None:
    """CreateTopics for one topic; None for the broker's default partitions / replication."""
    version = _version(client, ApiKey.CREATE_TOPICS, 7, "CreateTopics")
    request = request_type(ApiKey.CREATE_TOPICS, version)
    topic = build(sibling(request, "CreatableTopic"), name=name,
                  num_partitions=-1 if partitions is None else partitions,
                  replication_factor=-1 if replication_factor is None else replication_factor,
                  assignments=(), configs=tuple(
                      build(sibling(request, "CreatableTopicConfig"), name=key, value=value)
                      for key, value in configs.items()))
    (result,) = client.call(build(request, topics=(topic,), timeout=_TIMEOUT,
                                  validate_only=False)).topics
    if int(result.error_code) != ErrorCode.NONE:
        raise _failed(int(result.error_code), result.error_message, f"CreateTopics({name})")


def delete_topic(client: KafkaWireClient, name: str) -> None:
    version = _version(client, ApiKey.DELETE_TOPICS, 5, "DeleteTopics")
    (result,) = client.call(build(request_type(ApiKey.DELETE_TOPICS, version), topic_names=(name,),
                                  timeout=_TIMEOUT)).responses
    if int(result.error_code) != ErrorCode.NONE:
        raise _failed(int(result.error_code), getattr(result, "error_message", None),
                      f"DeleteTopics({name})")


def add_partitions(client: KafkaWireClient, name: str, total: int) -> None:
    """CreatePartitions: grow the topic to `total` partitions (kafka-topics --alter)."""
    version = _version(client, ApiKey.CREATE_PARTITIONS, 3, "CreatePartitions")
    request = request_type(ApiKey.CREATE_PARTITIONS, version)
    (result,) = client.call(build(request, topics=(build(
        sibling(request, "CreatePartitionsTopic"), name=name, count=total, assignments=None),),
        timeout=_TIMEOUT, validate_only=False)).results
    if int(result.error_code) != ErrorCode.NONE:
        raise _failed(int(result.error_code), result.error_message, f"CreatePartitions({name})")


def delete_records(client: KafkaWireClient, offsets: Mapping[tuple[str, int], int]
                   ) -> dict[tuple[str, int], tuple[ErrorCode, int]]:
    """DeleteRecords: move each partition's log start up to its offset (-1: the high
    watermark). Returns (error, low watermark) per partition; the low watermark is the new
    log start offset when the error is NONE."""
    version = _version(client, ApiKey.DELETE_RECORDS, 2, "DeleteRecords")
    request = request_type(ApiKey.DELETE_RECORDS, version)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    response = client.call(build(request, timeout=_TIMEOUT, topics=tuple(
        build(sibling(request, "DeleteRecordsTopic"), name=topic, partitions=tuple(
            build(sibling(request, "DeleteRecordsPartition"), partition_index=partition,
                  offset=offset) for partition, offset in entries))
        for topic, entries in by_topic.items())))
    return {(topic.name, int(p.partition_index)): (ErrorCode(int(p.error_code)),
                                                   int(p.low_watermark))
            for topic in response.topics for p in topic.partitions}


def metadata(client: KafkaWireClient, names: list[str] | None) -> Any:
    """The brokers and the named topics (every topic when None), as the broker answers them;
    transaction_admin reads the partitions' leaders from it."""
    version = _version(client, ApiKey.METADATA, 12, "Metadata")
    request = request_type(ApiKey.METADATA, version)
    topics = None if names is None else tuple(
        build(sibling(request, "MetadataRequestTopic"), name=name, topic_id=None)
        for name in names)
    return client.call(build(request, topics=topics, allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False,
                             include_topic_authorized_operations=False))


def list_topics(client: KafkaWireClient, *, include_internal: bool = True) -> list[str]:
    return sorted(t.name for t in metadata(client, None).topics
                  if include_internal or not t.is_internal)


def _topic_configs(client: KafkaWireClient, name: str) -> dict[str, str]:
    version = _version(client, ApiKey.DESCRIBE_CONFIGS, 4, "DescribeConfigs")
    request = request_type(ApiKey.DESCRIBE_CONFIGS, version)
    (result,) = client.call(build(request, resources=(build(
        sibling(request, "DescribeConfigsResource"), resource_type=TOPIC_RESOURCE,
        resource_name=name, configuration_keys=None),), include_synonyms=False,
        include_documentation=False)).results
    if int(result.error_code) != ErrorCode.NONE:
        raise _failed(int(result.error_code), result.error_message, f"DescribeConfigs({name})")
    return {entry.name: entry.value for entry in result.configs
            if int(entry.config_source) == TOPIC_CONFIG_SOURCE and entry.value is not None}


def describe_topics(client: KafkaWireClient, names: list[str] | None) -> list[TopicDescription]:
    """Partitions (leader, replicas, in-sync replicas, log start and end), topic id and the
    topic's own settings, for the named topics (all when None). An unknown name raises."""
    described = []
    for topic in sorted(metadata(client, names).topics, key=lambda t: t.name):
        code = int(topic.error_code)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"Topic '{topic.name}' does not exist as expected")
        if code != ErrorCode.NONE:
            raise AdminError(f"Metadata({topic.name}): {ErrorCode(code).name}")
        keys = [(topic.name, int(p.partition_index)) for p in topic.partitions]
        starts = list_offsets(client, keys, EARLIEST_TIMESTAMP) if keys else {}
        ends = list_offsets(client, keys, LATEST_TIMESTAMP) if keys else {}
        partitions = sorted(
            PartitionInfo(int(p.partition_index), int(p.leader_id),
                          tuple(int(r) for r in p.replica_nodes),
                          tuple(int(r) for r in p.isr_nodes),
                          starts.get((topic.name, int(p.partition_index))),
                          ends.get((topic.name, int(p.partition_index))))
            for p in topic.partitions)
        topic_id = getattr(topic, "topic_id", None)
        described.append(TopicDescription(
            name=topic.name,
            topic_id=None if topic_id in (None, uuid.UUID(int=0)) else _kafka_uuid(topic_id),
            internal=bool(topic.is_internal),
            partitions=tuple(partitions),
            configs=_topic_configs(client, topic.name),
        ))
    return described


def _kafka_uuid(value: uuid.UUID) -> str:
    """Kafka prints topic ids as URL-safe base64 without padding (e.g. `Xh3Yd_W7QyS...`)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
