"""kgroups assignors inside kafka-python 3.x consumers.

    from kgroups.assignors.kafka_python_adapter import KafkaPythonAssignor
    KafkaConsumer(..., partition_assignment_strategy=[KafkaPythonAssignor("cooperative-sticky")])

kafka-python accepts assignor instances in `partition_assignment_strategy`, keyed by `name`;
the leader's `assign` receives JoinGroup members whose `metadata` is a decoded
ConsumerProtocolSubscription (owned partitions and generation from v1/v2, rack from v3).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.coordinator.assignors.abstract import RebalanceProtocol as KafkaRebalanceProtocol
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from kgroups.assignors.client_metadata import cluster_metadata
from kgroups.assignors.interface import create_assignor
from kgroups.assignors.model import NO_GENERATION, MemberSubscription

# v3 carries owned partitions (v1), the generation (v2) and the member's rack (v3).
_SUBSCRIPTION_VERSION = 3


class KafkaPythonAssignor(AbstractPartitionAssignor):
    """Wraps the kgroups strategy registered as `strategy` for one kafka-python consumer."""

    def __init__(self, strategy: str, rack: str | None = None) -> None:
        self._assignor = create_assignor(strategy)
        self._rack = rack
        self._owned: dict[str, list[int]] = {}
        self._generation = NO_GENERATION

    @property
    def name(self) -> str:
        return self._assignor.name

    def supported_protocols(self) -> list[KafkaRebalanceProtocol]:
        return [KafkaRebalanceProtocol(int(p)) for p in self._assignor.supported_protocols]

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolSubscription:
        wanted = frozenset(topics)
        owned = [
            ConsumerProtocolSubscription.TopicPartition(topic=topic, partitions=parts)
            for topic, parts in sorted(self._owned.items())
        ]
        return ConsumerProtocolSubscription(
            version=_SUBSCRIPTION_VERSION,
            topics=sorted(wanted),
            user_data=self._assignor.subscription_user_data(wanted) or b"",
            owned_partitions=owned,
            generation_id=self._generation,
            rack_id=self._rack,
        )

    def assign(self, cluster: Any, members: list[Any]) -> dict[str, ConsumerProtocolAssignment]:
        subscriptions = [_member_subscription(member) for member in members]
        wanted = {t for s in subscriptions for t in s.topics}
        result = self._assignor.assign(cluster_metadata(cluster, wanted), subscriptions)
        return {
            member_id: ConsumerProtocolAssignment(
                version=0, assigned_partitions=sorted(topics.items()), user_data=b""
            )
            for member_id, topics in result.as_dict().items()
        }

    def on_assignment(self, assignment: ConsumerProtocolAssignment, generation: int) -> None:
        self._owned = {topic: list(parts) for topic, parts in assignment.assigned_partitions}
        self._generation = generation
        self._assignor.on_assignment(self._owned, generation)


def _member_subscription(member: Any) -> MemberSubscription:
    metadata = member.metadata
    owned = {tp.topic: tp.partitions for tp in getattr(metadata, "owned_partitions", None) or ()}
    generation = getattr(metadata, "generation_id", None)
    user_data = metadata.user_data
    return MemberSubscription.of(
        member.member_id,
        metadata.topics,
        owned,
        NO_GENERATION if generation is None else generation,
        getattr(metadata, "rack_id", None) or None,
        getattr(member, "group_instance_id", None),
        user_data if isinstance(user_data, bytes) and user_data else None,
    )
