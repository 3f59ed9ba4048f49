"""StreamsGroupHeartbeat's broker side: Kafka's ACL rule (group READ, topic DESCRIBE, CREATE for
the internal topics the broker creates) and the internal topics' creation."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from typing import Any

from broker_wire_helpers import request_of

from kgroups.broker.apis import streams_groups
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import RequestContext
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation, ResourceType
from kgroups.broker.wire import build, request_type, sibling
from kgroups.coordinator.streams_messages import StreamsGroupHeartbeatResponse, StreamsStatus
from kgroups.errors import ErrorCode
from kgroups.records.streams_group import TopicInfo

HB = request_type(88, 0)


class _Rights:
    """A principal's rights: the (operation, resource type, name) it holds."""

    def __init__(self, *held: tuple[Operation, ResourceType, str]) -> None:
        self.held = set(held)

    def __call__(self, operation: Operation, kind: ResourceType, name: str) -> bool:
        return (operation, kind, name) in self.held

    def group(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.GROUP, name)

    def topic(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.TOPIC, name)

    def cluster(self, operation: Operation) -> bool:
        return self(operation, ResourceType.CLUSTER, "kafka-cluster")


def _heartbeat(*sources: str, changelog: str = "app-store-changelog") -> Any:
    topology = build(sibling(HB, "Topology"), epoch=0, subtopologies=(build(
        sibling(HB, "Subtopology"), subtopology_id="0", source_topics=sources,
        source_topic_regex=(), repartition_sink_topics=(), repartition_source_topics=(),
        copartition_groups=(), state_changelog_topics=(build(
            sibling(HB, "TopicInfo"), name=changelog, partitions=0, replication_factor=0,
            topic_configs=()),)),))
    return request_of(88, 0, group_id="app", member_id="m", member_epoch=0,
                      endpoint_information_epoch=0, instance_id=None, rack_id=None,
                      rebalance_timeout=datetime.timedelta(seconds=30), topology=topology,
                      active_tasks=(), standby_tasks=(), warmup_tasks=(), process_id="p",
                      user_endpoint=None, client_tags=None, task_offsets=None,
                      task_end_offsets=None, shutdown_application=False)


def test_heartbeat_acl_rule_is_kafkas() -> None:
    seen: list[RequestContext] = []

    async def inner(ctx: RequestContext, request: Any) -> Any:
        seen.append(ctx)
        return authz.response(ctx, error_code=0, error_message=None, member_id="m",
                              member_epoch=2, heartbeat_interval=datetime.timedelta(0),
                              acceptable_recovery_lag=0,
                              task_offset_interval=datetime.timedelta(0), status=(),
                              active_tasks=None, standby_tasks=None, warmup_tasks=None,
                              endpoint_information_epoch=0, partitions_by_user_endpoint=None)

    ctx = RequestContext(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 1, None, "127.0.0.1",
                         None)  # type: ignore[arg-type]
    rule = authz.RULES[ApiKey.STREAMS_GROUP_HEARTBEAT]

    def answer(rights: _Rights, request: Any = None) -> Any:
        return asyncio.run(rule(ctx, request or _heartbeat("words"), inner,
                                rights))  # type: ignore[arg-type]

    read = (Operation.READ, ResourceType.GROUP, "app")
    words = (Operation.DESCRIBE, ResourceType.TOPIC, "words")
    changelog = (Operation.DESCRIBE, ResourceType.TOPIC, "app-store-changelog")
    denied = answer(_Rights(words, changelog))
    assert (int(denied.error_code), denied.error_message) == (30, None)  # as Kafka answers it
    hidden = answer(_Rights(read, words))
    assert (int(hidden.error_code), hidden.error_message) == (29, None)
    assert seen == []
    assert int(answer(_Rights(read, words, changelog)).error_code) == 0
    (passed,) = seen
    assert passed.creatable_topics is not None
    assert passed.creatable_topics(["app-store-changelog"]) == frozenset()
    seen.clear()
    answer(_Rights(read, words, changelog,
                   (Operation.CREATE, ResourceType.TOPIC, "app-store-changelog")))
    assert seen[0].creatable_topics is not None
    assert seen[0].creatable_topics(["app-store-changelog", "x"]) == {"app-store-changelog"}
    seen.clear()
    answer(_Rights(read, words, changelog, (Operation.CREATE, ResourceType.CLUSTER,
                                            "kafka-cluster")))
    assert seen[0].creatable_topics is not None
    assert seen[0].creatable_topics(["a", "b"]) == {"a", "b"}


def test_topologies_naming_kafkas_topics_or_bad_names_are_refused() -> None:
    assert streams_groups.topology_error(_heartbeat("__consumer_offsets", "words")) == (
        "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is "
        "prohibited.")
    assert streams_groups.topology_error(_heartbeat("bad topic", "x*y")) == (
        "Topic names bad topic,x*y are not valid topic names.")
    assert streams_groups.topology_error(_heartbeat("words")) is None


class _Topics:
    def __init__(self) -> None:
        self.created: dict[str, tuple[int, dict[str, str]]] = {}

    def partition_count(self, name: str) -> int | None:
        return self.created[name][0] if name in self.created else None

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> ErrorCode:
        self.created[name] = (partitions, configs)
        return ErrorCode.NONE


def test_internal_topics_are_created_if_the_principal_may() -> None:
    topics = _Topics()
    broker = dataclasses.make_dataclass("B", [("topics", Any)])(topics)
    answer = StreamsGroupHeartbeatResponse(
        ErrorCode.NONE, status=((StreamsStatus.MISSING_INTERNAL_TOPICS,
                                 "Internal topics are missing: a-rep, a-changelog"),),
        creatable_topics=(TopicInfo("a-rep", 4), TopicInfo("a-changelog", 4, 0, (
            ("cleanup.policy", "compact"),))))
    ctx = RequestContext(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 1, None, "127.0.0.1", broker,
                         creatable_topics=lambda names: frozenset({"a-changelog"}) & set(names))
    told = streams_groups._create_internal_topics(ctx, answer)
    assert topics.created == {"a-changelog": (4, {"cleanup.policy": "compact"})}
    assert told.status == ((StreamsStatus.MISSING_INTERNAL_TOPICS,
                            "Internal topics are missing: a-rep, a-changelog; Unauthorized to "
                            "CREATE on topics a-rep."),)
    everyone = dataclasses.replace(ctx, creatable_topics=None)
    assert streams_groups._create_internal_topics(everyone, answer).status == answer.status
    assert set(topics.created) == {"a-rep", "a-changelog"}
