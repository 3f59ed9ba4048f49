"""Raw requests for the partition side of transactions: transactional batches, markers through
WriteTxnMarkers, and read_committed Fetch and ListOffsets, any version."""

from __future__ import annotations

import datetime
from typing import Any

from tests.broker.broker_wire_helpers import nested_of, request_of

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import KafkaWireClient

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def txn_batch(producer_id: int, *values: bytes, epoch: int = 0, sequence: int = 0,
              transactional: bool = True) -> bytes:
    return build_batch([(b"k", value, 1_700_000_000_000) for value in values],
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                       transactional=transactional)


def markers_request(version: int, *markers: tuple[int, int, bool, str, tuple[int, ...]],
                    coordinator_epoch: int = 0, transaction_version: int = 0) -> Any:
    """WriteTxnMarkers of (producer id, epoch, commits, topic, partitions) markers."""
    api = ApiKey.WRITE_TXN_MARKERS
    return request_of(api, version, markers=tuple(
        nested_of(api, version, "WritableTxnMarker", producer_id=producer_id,
                  producer_epoch=epoch, transaction_result=commits,
                  coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
                  topics=(nested_of(api, version, "WritableTxnMarkerTopic", name=topic,
                                    partition_indexes=partitions),))
        for producer_id, epoch, commits, topic, partitions in markers))


def write_marker(client: KafkaWireClient, topic: str, producer_id: int, commits: bool,
                 epoch: int = 0, version: int = 1, transaction_version: int = 0) -> int:
    """One marker on partition 0; its error code."""
    response = client.call(markers_request(version, (producer_id, epoch, commits, topic, (0,)),
                                           transaction_version=transaction_version))
    return int(response.markers[0].topics[0].partitions[0].error_code)


def fetch_request(version: int, topic: str, offset: int, isolation: int, *,
                  max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = 1 << 20) -> Any:
    api = ApiKey.FETCH
    partition = nested_of(api, version, "FetchPartition", partition=0, current_leader_epoch=-1,
                          fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                          partition_max_bytes=max_bytes)
    return request_of(api, version, replica_id=-1,
                      max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                      min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation,
                      session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                      topics=(nested_of(api, version, "FetchTopic", topic=topic,
                                        partitions=(partition,)),))


def fetch_partition(client: KafkaWireClient, topic: str, offset: int, isolation: int,
                    version: int = 12, **options: Any) -> Any:
    return client.call(fetch_request(version, topic, offset, isolation,
                                     **options)).responses[0].partitions[0]


def list_latest(client: KafkaWireClient, topic: str, isolation: int, version: int = 6,
                timestamp: int = -1) -> int:
    api = ApiKey.LIST_OFFSETS
    request = request_of(api, version, replica_id=-1, isolation_level=isolation,
                         timeout=datetime.timedelta(seconds=5),
                         topics=(nested_of(api, version, "ListOffsetsTopic", name=topic,
                                           partitions=(nested_of(
                                               api, version, "ListOffsetsPartition",
                                               partition_index=0, current_leader_epoch=-1,
                                               timestamp=timestamp),)),))
    return int(client.call(request).topics[0].partitions[0].offset)
