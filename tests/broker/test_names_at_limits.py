"""Names and ids at the limits Kafka 4.3.1 sets, asked of Kafka and of kgroups alike: the
longest legal topic name, names that collide once '.' and '_' are folded, and client and
instance ids too long to leave room for the member id a JoinGroup hands out."""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from config_wire_helpers import describe
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol

from kafka_harness import KafkaBroker
from kgroups.broker.topic_configs import TopicConfigStore
from kgroups.broker.wire import build, request_type, sibling
from kgroups.tools.wire_client import KafkaWireClient

TOPIC_RESOURCE = 2


def _client(broker: Any, client_id: str = "limits-test") -> KafkaWireClient:
    return KafkaWireClient(broker.host, broker.port, timeout=20, client_id=client_id)


def _create(broker: Any, name: str, configs: dict[str, str] | None = None
            ) -> tuple[int, str | None]:
    request = request_type(19, 7)
    topic = build(sibling(request, "CreatableTopic"), name=name, num_partitions=2,
                  replication_factor=1, assignments=(), configs=tuple(
                      build(sibling(request, "CreatableTopicConfig"), name=key, value=value)
                      for key, value in (configs or {}).items()))
    with _client(broker) as client:
        response = client.call(build(request, topics=(topic,), validate_only=False,
                                     timeout=datetime.timedelta(seconds=10)))
    (result,) = response.topics
    return int(result.error_code), result.error_message


def _delete(broker: Any, name: str) -> int:
    request = request_type(20, 6)
    with _client(broker) as client:
        response = client.call(build(request, topics=(
            build(sibling(request, "DeleteTopicState"), name=name, topic_id=uuid.UUID(int=0)),),
            timeout=datetime.timedelta(seconds=10)))
    return int(response.responses[0].error_code)


def _topic_setting(broker: Any, topic: str, key: str) -> tuple[str, int]:
    """(value, source) of a topic's setting, once the topic is known (Kafka's brokers learn
    of a new topic from its controller a moment after CreateTopics answers)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with _client(broker) as client:
                value, source, _ = describe(client, TOPIC_RESOURCE, topic)[key]
            return value, source
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_longest_topic_name_takes_settings_and_one_more_character_is_refused(
        any_broker: Any) -> None:
    name = "L" * 248 + uuid.uuid4().hex[:1]
    assert _create(any_broker, name, {"retention.ms": "600000"}) == (0, None)
    assert _topic_setting(any_broker, name, "retention.ms") == ("600000", 1)
    assert _delete(any_broker, name) == 0
    too_long = "M" * 250
    assert _create(any_broker, too_long) == (
        17, f"Topic name is invalid: the length of '{too_long}' is longer than the max "
            "allowed length 249")  # INVALID_TOPIC_EXCEPTION


def test_names_equal_but_for_dot_and_underscore_collide(any_broker: Any) -> None:
    stem = f"coll{uuid.uuid4().hex[:8]}"
    assert _create(any_broker, f"{stem}.dot") == (0, None)
    assert _create(any_broker, f"{stem}_dot") == (
        17, f"Topic '{stem}_dot' collides with existing topic: {stem}.dot")
    assert _delete(any_broker, f"{stem}.dot") == 0


def _join(broker: Any, group: str, client_id: str, instance: str | None) -> tuple[int, str]:
    request = JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
        group_instance_id=instance, protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))
    with _client(broker, client_id) as client:
        response = client.call(request)
    return int(response.error_code), response.member_id


@pytest.mark.parametrize("who", ["client_id", "group_instance_id"])
def test_an_id_too_long_for_a_member_id_fails_the_join_and_leaves_no_member(
        any_broker: Any, who: str) -> None:
    group = f"huge-ids-{who}-{uuid.uuid4().hex[:8]}"
    huge = "x" * 32767
    client_id, instance = (huge, None) if who == "client_id" else ("c", huge)
    assert _join(any_broker, group, client_id, instance) == (-1, "")  # UNKNOWN_SERVER_ERROR
    with _client(any_broker) as client:
        (described,) = client.call(DescribeGroupsRequest(
            groups=(group,), include_authorized_operations=False)).groups
    if who == "group_instance_id" and isinstance(any_broker, KafkaBroker):
        # Kafka 4.3.1 keeps the static member it could not answer: describing the group fails
        # from then on (docs/compatibility.md). kgroups keeps nothing of the failed join.
        assert int(described.error_code) == -1
    else:
        assert (int(described.error_code), described.members) == (0, ())
    # Just short enough: the id is handed out, the client id or instance id first.
    code, member_id = _join(any_broker, group, client_id[:32700], instance and instance[:32700])
    assert (code, len(member_id)) == (79 if instance is None else 0, 32737)  # MEMBER_ID_REQUIRED


def test_settings_files_of_an_older_data_directory_are_kept(tmp_path: Path) -> None:
    directory = tmp_path / "__topic_configs"
    directory.mkdir()
    (directory / "orders.properties").write_text("retention.ms=600000\n")
    store = TopicConfigStore(tmp_path)
    assert store.load_all() == {"orders": {"retention.ms": "600000"}}
    store.save("L" * 249, {"cleanup.policy": "compact"})
    assert TopicConfigStore(tmp_path).load_all() == {
        "orders": {"retention.ms": "600000"}, "L" * 249: {"cleanup.policy": "compact"}}


def test_a_colliding_name_is_not_auto_created(any_broker: Any) -> None:
    stem = f"auto{uuid.uuid4().hex[:8]}"
    assert _create(any_broker, f"{stem}.dot") == (0, None)
    with _client(any_broker) as client:
        (topic,) = client.call(build(request_type(3, 12), topics=(
            build(sibling(request_type(3, 12), "MetadataRequestTopic"), name=f"{stem}_dot",
                  topic_id=uuid.UUID(int=0)),), allow_auto_topic_creation=True,
            include_topic_authorized_operations=False)).topics
    assert (int(topic.error_code), topic.partitions) == (3, ())  # UNKNOWN_TOPIC_OR_PARTITION
    assert _delete(any_broker, f"{stem}.dot") == 0
