"""The share coordinator's APIs against Kafka 4.3.1, field for field: FindCoordinator for a
share-partition key (well-formed or not, by version), then InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState (v0 and v1), ReadShareGroupStateSummary (v0 and v1)
and DeleteShareGroupState through a share-partition's life, with every refusal Kafka gives:
uninitialized share-partitions, fenced leader and state epochs, unknown topics and partitions,
negative partitions, an empty group id, and the merged state batches a read returns.

Topic ids differ between the brokers: answers are recorded with the topic's name instead."""

from __future__ import annotations

import base64
import dataclasses
import time
import uuid
from typing import Any

import pytest
from diff_dialog import Connection, Dialog
from tests.broker.broker_wire_helpers import nested_of, request_of

pytestmark = pytest.mark.kafka

FIND_COORDINATOR, METADATA = 10, 3
INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
TOPIC = "diff-t"  # three partitions on both brokers
RETRIABLE = frozenset({14, 15, 16})
# A topic id neither broker has, the same on both (the order of results depends on it).
NO_SUCH_TOPIC = uuid.UUID("5f0c7d3e-2b1a-4c9e-8d7f-6a5b4c3d2e1f")


def _topic_id(c: Connection) -> uuid.UUID:
    answer = c.call(request_of(METADATA, 12, topics=(
        nested_of(METADATA, 12, "MetadataRequestTopic", topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        record=False)
    topic_id: uuid.UUID = answer.topics[0].topic_id
    return topic_id


def _text(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


class ShareState:
    """One broker's share coordinator APIs, answers recorded with topic names for ids."""

    def __init__(self, d: Dialog, c: Connection, topic_id: uuid.UUID) -> None:
        self.d, self.c, self.topic_id = d, c, topic_id
        self.names = {topic_id: TOPIC, uuid.UUID(int=0): "zero", NO_SUCH_TOPIC: "no such",
                      uuid.UUID(int=7 << 64 | 3): "7|3", uuid.UUID(int=1 << 100): "1<<100"}

    def _topic(self, topic: uuid.UUID | None) -> uuid.UUID:
        return self.topic_id if topic is None else topic

    def _call(self, label: str, api: int, v: int, group: str, topic_class: str,
              topics: list[tuple[uuid.UUID, list[dict[str, Any]]]], *,
              topic_order: bool = False) -> None:
        """The results by topic name, or as ordered (`topic_order`: only for topic ids that
        are the same on both brokers, since results come in an order set by their hash)."""
        request = request_of(api, v, group_id=group, topics=tuple(
            nested_of(api, v, topic_class, topic_id=topic_id, partitions=tuple(
                nested_of(api, v, "PartitionData", **fields) for fields in partitions))
            for topic_id, partitions in topics))
        answer = self.c.call(request, record=False)
        results = [{"topic": self.names.get(result.topic_id or uuid.UUID(int=0), "other"),
                    "partitions": [_fields(p) for p in result.partitions]}
                   for result in answer.results]
        self.d.record(label, results if topic_order else sorted(
            results, key=lambda result: str(result["topic"])))

    def initialize(self, label: str, partition: int, state_epoch: int, start_offset: int, *,
                   group: str | None = None, topic: uuid.UUID | None = None) -> None:
        self._call(label, INITIALIZE, 0, self.d.group if group is None else group,
                   "InitializeStateData", [(self._topic(topic), [
                       {"partition": partition, "state_epoch": state_epoch,
                        "start_offset": start_offset}])])

    def read(self, label: str, partition: int, leader_epoch: int, *,
             topic: uuid.UUID | None = None) -> None:
        self._call(label, READ, 0, self.d.group, "ReadStateData", [(self._topic(topic), [
            {"partition": partition, "leader_epoch": leader_epoch}])])

    def summary(self, label: str, partition: int, leader_epoch: int = 0, *, v: int = 1,
                topic: uuid.UUID | None = None) -> None:
        self._call(label, SUMMARY, v, self.d.group, "ReadStateSummaryData",
                   [(self._topic(topic), [{"partition": partition,
                                           "leader_epoch": leader_epoch}])])

    def write(self, label: str, partition: int, state_epoch: int, leader_epoch: int,
              start_offset: int, batches: list[tuple[int, int, int, int]], *,
              delivered: int = -1, v: int = 1, topic: uuid.UUID | None = None) -> None:
        state_batches = tuple(
            nested_of(WRITE, v, "StateBatch", first_offset=first, last_offset=last,
                      delivery_state=state, delivery_count=count)
            for first, last, state, count in batches)
        self._call(label, WRITE, v, self.d.group, "WriteStateData", [(self._topic(topic), [
            {"partition": partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
             "start_offset": start_offset, "delivery_complete_count": delivered,
             "state_batches": state_batches}])])

    def delete(self, label: str, partition: int, *, topic: uuid.UUID | None = None) -> None:
        self._call(label, DELETE, 0, self.d.group, "DeleteStateData",
                   [(self._topic(topic), [{"partition": partition}])])


def _fields(partition: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(partition):
        name = field.name
        value = getattr(partition, name)
        if name == "error_code":
            value = int(value)
        elif name == "state_batches":
            value = [(int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                      int(b.delivery_count)) for b in value]
        fields[name] = value
    return fields


def _find(c: Connection, key: str, v: int) -> dict[str, Any]:
    if v >= 4:
        answer = c.call(request_of(FIND_COORDINATOR, v, key_type=2, coordinator_keys=(key,)),
                        record=False).coordinators[0]
    else:
        answer = c.call(request_of(FIND_COORDINATOR, v, key_type=2, key=key), record=False)
    return {"error": int(answer.error_code), "message": answer.error_message,
            "coordinator found": int(answer.node_id) >= 0}


def _wait_coordinator(c: Connection, key: str) -> None:
    """Kafka creates __share_group_state on the first lookup and answers retriable errors
    until it is loaded: look up (unrecorded) until it answers, as the broker's persister does."""
    deadline = time.monotonic() + 60
    while _find(c, key, 6)["error"] != 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_find_coordinator_for_share_partition_keys(converse: Any) -> None:
    def script(d: Dialog) -> None:
        c = d.connect("share-coordinator")
        topic = _text(_topic_id(c))
        _wait_coordinator(c, f"{d.group}:{topic}:0")
        keys = {"well-formed": f"{d.group}:{topic}:1", "group with colons": f"a:b:{topic}:0",
                "trailing colon": f"{d.group}:{topic}:0:", "negative partition":
                    f"{d.group}:{topic}:-1", "zero topic id": f"{d.group}:AAAAAAAAAAAAAAAAAAAAAA:0",
                "unknown topic": f"{d.group}:{_text(uuid.uuid4())}:0", "two parts": "g:x",
                "blank group": f" :{topic}:0", "bad topic id": f"{d.group}:not-an-id:0",
                "bad partition": f"{d.group}:{topic}:x", "empty": ""}
        for v in (3, 4, 5, 6):
            for name, key in keys.items():
                d.record(f"v{v} {name}", _find(c, key, v))

    converse(script)


def _ready(d: Dialog) -> ShareState:
    c = d.connect("share-state")
    topic_id = _topic_id(c)
    _wait_coordinator(c, f"{d.group}:{_text(topic_id)}:0")
    state = ShareState(d, c, topic_id)
    deadline = time.monotonic() + 60
    while True:  # the share-partition's __share_group_state partition may still be loading
        answer = c.call(request_of(SUMMARY, 1, group_id=d.group, topics=(nested_of(
            SUMMARY, 1, "ReadStateSummaryData", topic_id=topic_id, partitions=(nested_of(
                SUMMARY, 1, "PartitionData", partition=0, leader_epoch=0),)),)), record=False)
        if int(answer.results[0].partitions[0].error_code) not in RETRIABLE:
            return state
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_share_partition_state_through_its_life(converse: Any) -> None:
    def script(d: Dialog) -> None:
        s = _ready(d)
        s.read("read before initialize", 0, 0)
        s.summary("summary before initialize", 0)
        s.summary("summary v0 before initialize", 0, v=0)
        s.write("write before initialize", 0, 0, 0, 0, [])
        s.delete("delete before initialize", 0)
        s.initialize("initialize", 0, 0, 10)
        s.read("read initialized", 0, 0)
        s.write("write overlapping batches", 0, 0, 1, 10,
                [(10, 15, 0, 1), (12, 13, 2, 1), (20, 22, 4, 3)], delivered=5)
        s.read("read with a newer leader epoch", 0, 1)
        s.write("write with an older leader epoch", 0, 0, 0, 10, [(16, 19, 0, 1)])
        s.write("write without epochs", 0, -1, -1, -1, [(16, 25, 0, 2)])
        s.read("read without a leader epoch", 0, -1)
        s.read("read with an older leader epoch", 0, 0)
        s.read("read with a later leader epoch", 0, 3)
        s.summary("summary", 0)
        s.summary("summary v0", 0, 7, v=0)
        s.write("write v0 moving the start offset", 0, 0, 3, 14, [(26, 30, 2, 1)], v=0)
        s.read("read after the start offset moved", 0, 3)
        s.initialize("initialize again with a newer state epoch", 0, 2, 30)
        s.write("write with an older state epoch", 0, 1, 3, 30, [])
        s.initialize("initialize with an older state epoch", 0, 1, 30)
        s.read("read after initializing again", 0, 3)
        s.write("write after initializing again", 0, 2, 3, 31, [(31, 40, 0, 3)], delivered=0)
        s.summary("summary after initializing again", 0)
        s.initialize("initialize without a start offset", 1, 0, -1)
        s.summary("summary without a start offset", 1)
        s.read("read without a start offset", 1, 0)
        s.delete("delete", 0)
        s.read("read after delete", 0, 3)
        s.summary("summary after delete", 0)
        s.delete("delete again", 0)
        s.initialize("initialize after delete", 0, 0, 50)
        s.read("read after initializing a deleted one", 0, 0)

    converse(script)


def test_refusals(converse: Any) -> None:
    def script(d: Dialog) -> None:
        s = _ready(d)
        unknown, zero = uuid.uuid4(), uuid.UUID(int=0)
        for name, topic, partition in (("unknown topic", unknown, 0), ("zero topic id", zero, 0),
                                       ("partition past the last", None, 3),
                                       ("negative partition", None, -1)):
            s.initialize(f"initialize {name}", partition, 0, 0, topic=topic)
            s.read(f"read {name}", partition, 0, topic=topic)
            s.write(f"write {name}", partition, 0, 0, 0, [], topic=topic)
            s.summary(f"summary {name}", partition, topic=topic)
            s.delete(f"delete {name}", partition, topic=topic)
        s.initialize("initialize with an empty group id", 0, 0, 0, group="")
        s.initialize("initialize with a blank group id", 0, 0, 0, group=" ")

    converse(script)


def test_requests_of_many_partitions_and_empty_requests(converse: Any) -> None:
    def script(d: Dialog) -> None:
        s = _ready(d)
        s._call("initialize two partitions and an unknown one", INITIALIZE, 0, d.group,
                "InitializeStateData", [(s.topic_id, [
                    {"partition": 0, "state_epoch": 0, "start_offset": 5},
                    {"partition": 2, "state_epoch": 0, "start_offset": 7}]),
                    (uuid.UUID(int=0), [{"partition": 0, "state_epoch": 0,
                                         "start_offset": 0}])])
        s._call("read both", READ, 0, d.group, "ReadStateData", [(s.topic_id, [
            {"partition": 0, "leader_epoch": 0}, {"partition": 2, "leader_epoch": 0}])])
        s._call("summaries in reverse order, the topic named twice", SUMMARY, 1, d.group,
                "ReadStateSummaryData", [
                    (s.topic_id, [{"partition": 2, "leader_epoch": 0},
                                  {"partition": 1, "leader_epoch": 0}]),
                    (NO_SUCH_TOPIC, [{"partition": 0, "leader_epoch": 0}]),
                    (s.topic_id, [{"partition": 0, "leader_epoch": 0}])])
        s._call("unknown topics in the order of their ids' hashes", SUMMARY, 1, d.group,
                "ReadStateSummaryData", [
                    (topic, [{"partition": 0, "leader_epoch": 0}])
                    for topic in (NO_SUCH_TOPIC, uuid.UUID(int=7 << 64 | 3), uuid.UUID(int=0),
                                  uuid.UUID(int=1 << 100))], topic_order=True)
        s._call("one bucket of topic ids, a topic named twice", SUMMARY, 1, d.group,
                "ReadStateSummaryData", [
                    (uuid.UUID(int=0), [{"partition": 16, "leader_epoch": 0}]),
                    (NO_SUCH_TOPIC, [{"partition": 0, "leader_epoch": 0}]),
                    (uuid.UUID(int=1 << 100), [{"partition": 1, "leader_epoch": 0}]),
                    (uuid.UUID(int=0), [{"partition": 0, "leader_epoch": 0},
                                        {"partition": 32, "leader_epoch": 0}])],
                topic_order=True)
        s._call("no topics", READ, 0, d.group, "ReadStateData", [])
        s._call("a topic without partitions", READ, 0, d.group, "ReadStateData",
                [(s.topic_id, [{"partition": 0, "leader_epoch": 0}]), (s.topic_id, [])])

    converse(script)
