"""kgroups assignors inside aiokafka 0.14 consumers.

    from kgroups.assignors.aiokafka_adapter import AIOKafkaAssignor
    AIOKafkaConsumer(..., partition_assignment_strategy=(AIOKafkaAssignor("sticky"),))

aiokafka looks strategies up by `name`, sends `metadata(topics).encode()` in JoinGroup, and on
the leader calls `assign(cluster, {member_id: ConsumerProtocolMemberMetadata})`. It speaks only
the eager protocol and subscription v0 (topics and user data: no owned partitions, generation,
rack or instance id), so cooperative strategies are not offered through it, and the sticky
history travels in the user data, which is why `sticky` keeps its stickiness here.
aiokafka does not tell assignors the generation; members report Kafka's "none" (-1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from kgroups.assignors.client_metadata import cluster_metadata
from kgroups.assignors.interface import create_assignor
from kgroups.assignors.model import (
    NO_GENERATION,
    AssignmentInputError,
    MemberSubscription,
    RebalanceProtocol,
)


class AIOKafkaAssignor(AbstractPartitionAssignor):
    """Wraps the kgroups strategy registered as `strategy` for one aiokafka consumer."""

    def __init__(self, strategy: str) -> None:
        assignor = create_assignor(strategy)
        if RebalanceProtocol.EAGER not in assignor.supported_protocols:
            raise AssignmentInputError(f"{strategy!r} needs the cooperative protocol")
        self._assignor = assignor

    @property
    def name(self) -> str:
        return self._assignor.name

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        wanted = frozenset(topics)
        user_data = self._assignor.subscription_user_data(wanted) or b""
        return ConsumerProtocolMemberMetadata(0, sorted(wanted), user_data)

    def assign(
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        subscriptions = [
            MemberSubscription.of(
                member_id,
                metadata.subscription,
                user_data=metadata.user_data or None,
            )
            for member_id, metadata in members.items()
        ]
        wanted = {t for s in subscriptions for t in s.topics}
        result = self._assignor.assign(cluster_metadata(cluster, wanted), subscriptions)
        return {
            member_id: ConsumerProtocolMemberAssignment(0, sorted(topics.items()), b"")
            for member_id, topics in result.as_dict().items()
        }

    def on_assignment(
        self, assignment: ConsumerProtocolMemberAssignment
    ) -> None:
        owned = {topic: list(parts) for topic, parts in assignment.assignment}
        self._assignor.on_assignment(owned, NO_GENERATION)
