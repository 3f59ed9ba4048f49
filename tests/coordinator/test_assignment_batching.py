"""group.consumer.assignment.interval.ms (KIP-1263, Kafka 4.3): a consumer group's target
assignment is computed at most once per interval, so members joining in a burst cost one
assignor run rather than one per join (which made forming a group quadratic), and a joiner
meanwhile gets the assignment epoch with nothing assigned. The setting's bounds are Kafka's.
The Kafka 4.3.1 conversation is compared in tests/differential/test_diff_consumer_protocol.py.
"""

from __future__ import annotations

import pytest
from tests.coordinator.test_consumer_protocol import T1, G, Session, topics

from kgroups.coordinator import GroupCoordinatorConfig
from kgroups.coordinator.consumer_group import ConsumerGroupState
from kgroups.errors import ErrorCode
from kgroups.records.consumer_group import ConsumerGroupTargetAssignmentMetadataKey

INTERVAL = 1000  # Kafka's default


def batching() -> Session:
    session = Session(config=GroupCoordinatorConfig())
    session.coordinator.set_topics(topics(t1=6))
    return session


def target_computations(s: Session) -> int:
    """Each computation of the group's target writes one target-assignment metadata record."""
    return sum(isinstance(record.key, ConsumerGroupTargetAssignmentMetadataKey)
               for records in s.log.values() for record in records)


def test_kafkas_defaults_and_bounds() -> None:
    config = GroupCoordinatorConfig()
    assert (config.group_consumer_assignment_interval_ms,
            config.group_consumer_min_assignment_interval_ms,
            config.group_consumer_max_assignment_interval_ms) == (1000, 0, 15000)
    parsed = GroupCoordinatorConfig.from_properties(
        {"group.consumer.assignment.interval.ms": "0"})
    assert parsed.group_consumer_assignment_interval_ms == 0


@pytest.mark.parametrize(("properties", "message"), [
    ({"group.consumer.assignment.interval.ms": "5000",
      "group.consumer.max.assignment.interval.ms": "2000"},
     "group.consumer.assignment.interval.ms must be less than or equal to "
     "group.consumer.max.assignment.interval.ms"),
    ({"group.consumer.assignment.interval.ms": "100",
      "group.consumer.min.assignment.interval.ms": "500"},
     "group.consumer.assignment.interval.ms must be greater than or equal to "
     "group.consumer.min.assignment.interval.ms"),
    ({"group.consumer.assignment.interval.ms": "-1"},
     "group.consumer.assignment.interval.ms must be >= 0"),
    ({"group.consumer.max.size": "0"}, "group.consumer.max.size must be >= 1"),
])
def test_settings_kafka_refuses_are_refused(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroupCoordinatorConfig.from_properties(properties)


def test_a_burst_of_joins_costs_one_target_computation() -> None:
    """The first member gets the whole topic at once; the 199 joining within the interval
    are answered at that assignment epoch with nothing, and the group is Assigning. The
    first heartbeat after the interval computes one target for all 200."""
    s = batching()
    first = s.hb("m0", 0)
    assert (first.member_epoch, first.assignment) == (2, ((T1, (0, 1, 2, 3, 4, 5)),))
    for index in range(1, 200):
        joined = s.hb(f"m{index}", 0)
        assert (joined.error, joined.member_epoch, joined.assignment) == (ErrorCode.NONE, 2, ())
    group = s.group()
    assert (group.group_epoch, group.assignment_epoch) == (201, 2)
    assert group.state() == ConsumerGroupState.ASSIGNING
    assert target_computations(s) == 1

    s.advance(INTERVAL - 1)
    kept = s.hb("m0", 2, owned=((T1, (0, 1, 2, 3, 4, 5)),))
    assert kept.member_epoch == 2 and target_computations(s) == 1
    s.advance(1)
    revoking = s.hb("m0", 2, owned=((T1, (0, 1, 2, 3, 4, 5)),))
    assert target_computations(s) == 2
    assert group.assignment_epoch == 201
    assert sum(bool(target) for target in group.targets.values()) == 6
    assert revoking.assignment is not None and len(revoking.assignment[0][1]) == 1


def test_a_member_leaving_within_the_interval_waits_for_the_next_target() -> None:
    s = batching()
    s.hb("a", 0)
    s.hb("b", 0)
    s.hb("b", -1)
    group = s.group()
    assert group.group_epoch > group.assignment_epoch and target_computations(s) == 1
    s.advance(INTERVAL)
    assert s.hb("a", 2, owned=((T1, (0, 1, 2, 3, 4, 5)),)).member_epoch == group.group_epoch
    assert target_computations(s) == 2


def test_the_interval_survives_a_reload() -> None:
    """The time of the last computation is in its record: a coordinator loading the group
    keeps waiting out the interval (the target is not recomputed early)."""
    s = batching()
    s.hb("a", 0)
    s.hb("b", 0)
    fresh = s.replayed()
    group = fresh._groups[G].consumer
    assert group is not None and group.assignment_timestamp == s.now
    assert group.group_epoch > group.assignment_epoch


def test_max_size_counts_members_waiting_for_their_target() -> None:
    s = Session(config=GroupCoordinatorConfig(group_consumer_max_size=3))
    s.coordinator.set_topics(topics(t1=6))
    for name in "abc":
        assert s.hb(name, 0).error == ErrorCode.NONE
    refused = s.hb("d", 0)
    assert (refused.error, refused.error_message) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        "The consumer group has reached its maximum capacity of 3 members.")
    assert len(s.group().members) == 3
