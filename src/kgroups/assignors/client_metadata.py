"""Reads the cluster object kafka-python and aiokafka hand their assignors.

Both clients expose `partitions_for_topic(topic) -> set[int] | None` (None: no metadata yet,
so the topic is skipped, as in Kafka). Replica racks are not part of that public surface, so
through these clients range is not rack-aware.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kgroups.assignors.model import ClusterMetadata


class PartitionsByTopic(Protocol):
    def partitions_for_topic(self, topic: str) -> set[int] | None: ...


def cluster_metadata(cluster: PartitionsByTopic, topics: Iterable[str]) -> ClusterMetadata:
    counts = {}
    for topic in set(topics):
        partitions = cluster.partitions_for_topic(topic)
        if partitions:
            counts[topic] = max(partitions) + 1
    return ClusterMetadata(counts)
