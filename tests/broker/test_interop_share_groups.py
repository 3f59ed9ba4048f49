"""Share groups (KIP-932, "queues for Kafka") as real clients use them, on Kafka 4.3.1 and on
`kgroups serve`: Kafka's Java KafkaShareConsumer and librdkafka's share consumer, in pairs
sharing one partition, each record acknowledged as the test says (ACCEPT, RELEASE, REJECT).

What a user of a queue counts on, and what each test checks with exact delivery counts (the same
expectations on both brokers, so both give the same counts): every record is delivered; an
accepted record is never delivered again; a released one comes back with its delivery count one
higher; a rejected one is archived; a record released on its last allowed delivery
(`group.share.delivery.count.limit`) is archived; a member that holds records past the
acquisition lock (`group.share.record.lock.duration.ms`) loses them to the other member, and its
late acknowledgement changes nothing; and an acknowledgement the broker answered survives the
broker's SIGKILL: no accepted record is delivered again after the restart."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from group_interop_helpers import create_topic, produce
from share_members import (
    DELIVERY_COUNT_LIMIT,
    LOCK_DURATION_MS,
    MEMBER_KINDS,
    SHARE_SETTINGS,
    Delivery,
    DeliveryLog,
    JavaShareMember,
    ShareClient,
)
from tests.broker.servers import ServerProcess

from kafka_harness import KafkaBroker, kgroups_overrides

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TIMEOUT_S = 60.0
POLL_MS = 200
# How each kind of record is acknowledged at each delivery, and the delivery counts it is then
# delivered with: retried once, released until the delivery count limit archives it.
KINDS = ("accept", "retry", "reject", "release")
EXPECTED_COUNTS: dict[str, list[int | None]] = {
    "accept": [1],
    "retry": [1, 2],
    "reject": [1],
    "release": list(range(1, DELIVERY_COUNT_LIMIT + 1)),
}


def _acknowledgement(delivery: Delivery) -> str:
    kind = delivery.value.split("-", 1)[0]
    if kind == "reject":
        return "REJECT"
    if kind == "release" or (kind == "retry" and delivery.delivery_count == 1):
        return "RELEASE"
    return "ACCEPT"


@pytest.fixture(scope="module")
def share_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("share-kafka"), settings=SHARE_SETTINGS)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def share_kgroups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("share-kgroups")
    server = ServerProcess(workdir / "data", workdir / "server.log",
                           kgroups_overrides(SHARE_SETTINGS))
    server.start()
    yield server
    server.stop()
    server.close()


@pytest.fixture(params=[pytest.param("kafka", marks=pytest.mark.kafka), "kgroups"])
def share_broker(request: pytest.FixtureRequest) -> Any:
    """A broker with SHARE_SETTINGS (short locks, delivery count limit 3), Kafka or kgroups."""
    return request.getfixturevalue(f"share_{request.param}")


def _pump(members: Sequence[ShareClient], log: DeliveryLog,
          choose: Callable[[Delivery], str | None] = _acknowledgement) -> None:
    """Each member polls once and acknowledges what it got as `choose` says (None: holds the
    record, unacknowledged), committing synchronously; every acknowledgement must be taken."""
    for member in members:
        deliveries = member.poll(POLL_MS)
        log.deliveries.extend(deliveries)
        chosen = [(d, kind) for d in deliveries if (kind := choose(d)) is not None]
        if chosen:
            member.acknowledge(chosen)
            results = member.commit()
            assert all(error is None for error in results.values()), results


def _wait(condition: Callable[[], bool], what: str, pump: Callable[[], None]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        pump()


def _warm_up(bootstrap: str, topic: str, members: Sequence[ShareClient], log: DeliveryLog) -> None:
    """Records until one is delivered: the share partition starts at the log end when the group
    first reads it (share.auto.offset.reset=latest), so only records produced after that count."""
    counter = itertools.count()

    def pump() -> None:
        produce(bootstrap, topic, [f"warmup-{next(counter)}".encode()], 1)
        for _ in range(3):
            _pump(members, log)

    _wait(lambda: bool(log.deliveries), "a first record delivered to the share group", pump)
    log.deliveries.clear()


def _members(kind: str, bootstrap: str, group_id: str, topic: str, logs: Path,
             count: int = 2) -> list[ShareClient]:
    return [MEMBER_KINDS[kind](f"{kind}-{i}", bootstrap, group_id, topic, logs)
            for i in range(count)]


def _new_names(prefix: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"{prefix}-topic-{suffix}", f"{prefix}-group-{suffix}"


@pytest.mark.parametrize("client", sorted(MEMBER_KINDS))
def test_a_pair_shares_one_partition_with_exact_delivery_counts(
        share_broker: Any, client: str, tmp_path: Path) -> None:
    topic, group_id = _new_names(f"pair-{client}")
    create_topic(share_broker.bootstrap, topic, 1)
    members = _members(client, share_broker.bootstrap, group_id, topic, tmp_path)
    log = DeliveryLog()
    try:
        _warm_up(share_broker.bootstrap, topic, members, log)
        values = [f"{kind}-{n}" for n, kind in zip(range(40), itertools.cycle(KINDS), strict=False)]
        produce(share_broker.bootstrap, topic, [v.encode() for v in values], 1)

        def settled() -> bool:
            return all(len(log.of(v)) >= len(EXPECTED_COUNTS[v.split("-")[0]]) for v in values)

        _wait(settled, "every record's deliveries", lambda: _pump(members, log))
        quiet_until = time.monotonic() + 2.0  # a wrong redelivery would come right behind
        while time.monotonic() < quiet_until:
            _pump(members, log)
    finally:
        for member in members:
            member.close()
    assert {v: log.counts(v) for v in values} == {
        v: EXPECTED_COUNTS[v.split("-")[0]] for v in values}
    # Every delivery went to a member of the pair, and offsets are the records' own.
    assert {d.offset for d in log.deliveries} == {log.of(v)[0].offset for v in values}


@pytest.mark.parametrize("client", sorted(MEMBER_KINDS))
def test_records_held_past_their_lock_go_to_the_other_member(
        share_broker: Any, client: str, tmp_path: Path) -> None:
    topic, group_id = _new_names(f"lock-{client}")
    create_topic(share_broker.bootstrap, topic, 1)
    (holder,) = _members(client, share_broker.bootstrap, group_id, topic, tmp_path, count=1)
    other: ShareClient | None = None
    log = DeliveryLog()
    try:
        _warm_up(share_broker.bootstrap, topic, [holder], log)
        values = [f"held-{n}" for n in range(10)]
        produce(share_broker.bootstrap, topic, [v.encode() for v in values], 1)
        held: list[Delivery] = []

        def hold() -> None:
            deliveries = holder.poll(POLL_MS)
            held.extend(deliveries)
            log.deliveries.extend(deliveries)

        # The holder, alone in the group, acquires the records, then hangs.
        _wait(lambda: bool(held), "the holder acquiring records", hold)
        acquired_at = time.monotonic()
        holder.freeze()
        assert all(d.delivery_count == 1 for d in held), held
        # A second member gets everything, the held records once their locks have expired.
        other = member = MEMBER_KINDS[client](f"{client}-other", share_broker.bootstrap,
                                              group_id, topic, tmp_path)
        _wait(lambda: all(any(d.member == member.name for d in log.of(v)) for v in values),
              "the other member receiving every record", lambda: _pump([member], log))
        taken_over_at = time.monotonic()
        # The holder's late acknowledgement: neither client reports it refused on Kafka (the
        # records are already another's); what matters is that it changes nothing.
        holder.thaw()
        holder.acknowledge([(d, "ACCEPT") for d in held])
        holder.commit()
        quiet_until = time.monotonic() + 2.0
        while time.monotonic() < quiet_until:
            _pump([member], log)
    finally:
        holder.thaw()
        holder.close()
        if other is not None:
            other.close()
    held_values = {d.value for d in held}
    assert taken_over_at - acquired_at >= LOCK_DURATION_MS / 1000 * 0.75
    assert {v: log.counts(v) for v in held_values} == {v: [1, 2] for v in held_values}
    # Records the holder had not yet returned to its application (a client may fetch ahead)
    # come to the other member once, with the delivery count they reached.
    assert all(len(log.of(v)) == 1 for v in values if v not in held_values), log.deliveries
    assert all(d.member == member.name for v in values for d in log.of(v)
               if d.delivery_count != 1 or v not in held_values)


@pytest.mark.parametrize("kind", [pytest.param("kafka", marks=pytest.mark.kafka), "kgroups"])
def test_no_answered_acknowledgement_is_lost_to_a_broker_sigkill(
        kind: str, tmp_path: Path, start_kgroups_server: Callable[..., ServerProcess]) -> None:
    broker: Any
    if kind == "kafka":
        broker = KafkaBroker(tmp_path / "kafka", settings=SHARE_SETTINGS)
        broker.start()
    else:
        broker = start_kgroups_server(*kgroups_overrides(SHARE_SETTINGS))
    topic, group_id = _new_names("sigkill")
    create_topic(broker.bootstrap, topic, 1)
    log = DeliveryLog()
    first = JavaShareMember("before", broker.bootstrap, group_id, topic, tmp_path)
    second: JavaShareMember | None = None
    try:
        _warm_up(broker.bootstrap, topic, [first], log)
        values = [f"record-{n}" for n in range(60)]
        produce(broker.bootstrap, topic, [v.encode() for v in values], 1)
        _wait(lambda: len(log.deliveries) >= 30, "half the records accepted",
              lambda: _pump([first], log))
        answered = {d.value for d in log.deliveries}
        in_flight = first.poll(POLL_MS)  # acquired, never acknowledged
        broker.kill()
        first.kill()
        broker.start()
        second = JavaShareMember("after", broker.bootstrap, group_id, topic, tmp_path)
        after = DeliveryLog()
        _wait(lambda: {d.value for d in after.deliveries} >= set(values) - answered,
              "every record not accepted before the kill", lambda: _pump([second], after))
        quiet_until = time.monotonic() + 2.0
        while time.monotonic() < quiet_until:
            _pump([second], after)
    finally:
        if second is not None:
            second.close()
        first.kill()
        broker.close()
    redelivered = {d.value for d in after.deliveries}
    assert redelivered & answered == set()
    assert {d.value for d in in_flight} <= redelivered
    assert sorted(redelivered | answered) == sorted(values)
