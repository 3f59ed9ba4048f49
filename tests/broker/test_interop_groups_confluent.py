"""librdkafka (confluent-kafka) consumer groups against a real `kgroups serve`: three members per
assignor, exactly-once consumption with synchronous commits, takeover when a member closes, and
cooperative rebalancing that never takes away a partition that does not move."""

from __future__ import annotations

import pytest
from group_interop_helpers import (
    FAST_GROUP_OVERRIDES,
    TrackedConsumer,
    create_topic,
    produce,
    stable_with,
    wait_until,
)
from tests.broker.servers import ServerProcess

pytestmark = pytest.mark.interop

PARTITIONS = 6
TOPIC = "orders"


def _owners_cover_partitions_once(members: list[TrackedConsumer]) -> bool:
    owned = [p for member in members for p in member.owned]
    return sorted(owned) == list(range(PARTITIONS))


def _consume_everything(members: list[TrackedConsumer], expected: int) -> None:
    def pump() -> None:
        for member in members:
            member.pump()

    wait_until(lambda: sum(len(m.received) for m in members) >= expected,
               f"{expected} messages", pump=pump)
    for _ in range(5):  # a duplicate would arrive right behind the last original
        pump()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_three_members_share_partitions_consume_once_and_take_over(
    start_kgroups_server, strategy: str  # type: ignore[no-untyped-def]
) -> None:
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    bootstrap = server.bootstrap
    group_id = f"group-{strategy}"
    create_topic(bootstrap, TOPIC, PARTITIONS)
    members = [TrackedConsumer(bootstrap, group_id, TOPIC, f"member-{i}", strategy)
               for i in range(3)]
    try:
        def pump_all() -> None:
            for member in members:
                member.pump()

        wait_until(stable_with(bootstrap, group_id, 3), "a Stable group of 3", pump=pump_all)
        wait_until(lambda: _owners_cover_partitions_once(members),
                   "every partition owned by exactly one member", pump=pump_all)
        assert all(len(member.owned) == 2 for member in members)

        first = [f"first-{i}".encode() for i in range(300)]
        produce(bootstrap, TOPIC, first, PARTITIONS)
        _consume_everything(members, len(first))
        consumed = [value for member in members for value in member.received]
        assert sorted(consumed) == sorted(first)

        leaver, survivors = members[0], members[1:]
        before = {member.name: set(member.owned) for member in survivors}
        events_before = {member.name: len(member.events) for member in survivors}
        leaver.close()
        members = survivors

        wait_until(stable_with(bootstrap, group_id, 2), "a Stable group of 2", pump=pump_all)
        wait_until(lambda: _owners_cover_partitions_once(members),
                   "the survivors owning every partition", pump=pump_all)
        if strategy == "cooperative-sticky":
            # Only the leaver's partitions moved, so no survivor had anything revoked.
            for member in members:
                assert before[member.name] <= member.owned
                later = member.events[events_before[member.name]:]
                assert all(kind == "assign" for kind, _ in later), (member.name, later)

        second = [f"second-{i}".encode() for i in range(300)]
        produce(bootstrap, TOPIC, second, PARTITIONS)
        _consume_everything(members, len(second) + sum(len(m.received) for m in members))
        consumed = [value for member in [leaver, *members] for value in member.received]
        assert sorted(consumed) == sorted(first + second)
    finally:
        for member in members:
            member.close()


def test_cooperative_revocations_are_never_given_back_in_the_same_round(
    start_kgroups_server,  # type: ignore[no-untyped-def]
) -> None:
    """Members joining one by one: each revocation moves partitions to a newcomer; a member is
    never asked to give up a partition that it is then handed straight back."""
    server: ServerProcess = start_kgroups_server(*FAST_GROUP_OVERRIDES)
    bootstrap = server.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    members: list[TrackedConsumer] = []
    try:
        for count in range(1, 4):
            members.append(TrackedConsumer(bootstrap, "staggered", TOPIC, f"member-{count}",
                                           "cooperative-sticky"))

            def pump_all() -> None:
                for member in members:
                    member.pump()

            wait_until(stable_with(bootstrap, "staggered", count), f"a Stable group of {count}",
                       pump=pump_all)
            wait_until(lambda: _owners_cover_partitions_once(members),
                       "every partition owned once", pump=pump_all)
        for member in members:
            for index, (kind, partitions) in enumerate(member.events):
                if kind != "revoke":
                    continue
                handed_back = [p for later_kind, later in member.events[index + 1:]
                               if later_kind == "assign" for p in later & partitions]
                assert handed_back == [], (member.name, member.events)
        assert sorted(len(member.owned) for member in members) == [2, 2, 2]
        # The first member started with all six and was only ever revoked from afterwards.
        assert members[0].events[0] == ("assign", frozenset(range(PARTITIONS)))
        assert all(kind == "revoke" or not partitions for kind, partitions in members[0].events[1:])
    finally:
        for member in members:
            member.close()
