"""KIP-848 consumer groups in `kgroups analyze`'s group_generations and rebalances: one row per
target assignment epoch, partitions moved between targets, and how long the members took to
reconcile; their group_summary row (protocol, epochs, state) and why their epochs moved
(rebalance_causes), from records laid out as Kafka and kgroups write them (analysed outside
Spark, as one partition task runs)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.pipeline.logdata import OffsetsLogBuilder, coordinator_partition

from kgroups.log.topic_ids import write_partition_metadata
from kgroups.pipeline.partition import PartitionResult, analyze_partition
from kgroups.pipeline.tables import GROUP_GENERATIONS, REBALANCES, clear_table
from kgroups.pipeline.window import TimeWindow
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentKey as Current,
)
from kgroups.records.consumer_group import (
    ConsumerGroupCurrentMemberAssignmentValue as CurrentValue,
)
from kgroups.records.consumer_group import (
    ConsumerGroupMemberMetadataKey as Member,
)
from kgroups.records.consumer_group import (
    ConsumerGroupMemberMetadataValue as MemberValue,
)
from kgroups.records.consumer_group import ConsumerGroupMetadataKey as Epoch
from kgroups.records.consumer_group import ConsumerGroupMetadataValue as EpochValue
from kgroups.records.consumer_group import (
    ConsumerGroupTargetAssignmentMemberKey as Target,
)
from kgroups.records.consumer_group import (
    ConsumerGroupTargetAssignmentMemberValue as TargetValue,
)
from kgroups.records.consumer_group import (
    ConsumerGroupTargetAssignmentMetadataKey as TargetEpoch,
)
from kgroups.records.consumer_group import (
    ConsumerGroupTargetAssignmentMetadataValue as TargetEpochValue,
)

T = 1_700_000_000_000
G = "orders"
TOPIC_ID = uuid.UUID("5f4d3c2b-1a09-4877-8665-544332211000")
STABLE, UNREVOKED, UNRELEASED = 0, 1, 2
OPEN = TimeWindow()


def _member(name: str) -> tuple[Member, MemberValue]:
    return Member(G, name), MemberValue(None, None, f"client-{name}", "/127.0.0.1", ("t",),
                                        None, 45_000, "uniform")


def _parts(*partitions: int) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return ((TOPIC_ID, partitions),) if partitions else ()


def _current(name: str, epoch: int, previous: int, state: int, held: tuple[int, ...],
             pending: tuple[int, ...] = ()) -> tuple[Current, CurrentValue]:
    return Current(G, name), CurrentValue(epoch, previous, state, _parts(*held), _parts(*pending))


def _two_members_reconcile(log: OffsetsLogBuilder) -> None:
    """a joins and takes all four partitions; b joins at T+1 s (group epoch 2): a revokes 2
    and 3 at T+2.5 s, b gets them at T+3 s. Then a leaves at T+10 s, b takes everything."""
    log.records(G, [_member("a"), (Epoch(G), EpochValue(1)),
                    (Target(G, "a"), TargetValue(_parts(0, 1, 2, 3))),
                    (TargetEpoch(G), TargetEpochValue(1)),
                    _current("a", 1, 0, STABLE, (0, 1, 2, 3))], T)
    log.records(G, [_member("b"), (Epoch(G), EpochValue(2)),
                    (Target(G, "a"), TargetValue(_parts(0, 1))),
                    (Target(G, "b"), TargetValue(_parts(2, 3))),
                    (TargetEpoch(G), TargetEpochValue(2)),
                    _current("b", 2, 0, UNRELEASED, ())], T + 1000)
    log.records(G, [_current("a", 1, 0, UNREVOKED, (0, 1), (2, 3))], T + 1500)
    log.records(G, [_current("a", 2, 1, STABLE, (0, 1))], T + 2500)
    log.records(G, [_current("b", 2, 0, STABLE, (2, 3))], T + 3000)
    log.records(G, [(Current(G, "a"), None), (Target(G, "a"), None), (Member(G, "a"), None),
                    (Epoch(G), EpochValue(3)),
                    (Target(G, "b"), TargetValue(_parts(0, 1, 2, 3))),
                    (TargetEpoch(G), TargetEpochValue(3))], T + 10_000)


def _analyze(log: OffsetsLogBuilder, tmp_path: Path,
             window: TimeWindow = OPEN) -> tuple[list[dict[str, Any]],
                                                         list[dict[str, Any]]]:
    result = _result(log, tmp_path, window)
    return result.group_generations.to_pylist(), result.rebalances.to_pylist()


def _result(log: OffsetsLogBuilder, tmp_path: Path,
            window: TimeWindow = OPEN) -> PartitionResult:
    data = tmp_path / "data"
    segments = sorted(str(p) for p in log.write(data))
    (data / "t-0").mkdir()
    write_partition_metadata(data / "t-0", TOPIC_ID)
    out = str(tmp_path / "out")
    clear_table(out, "offset_commits")
    result = analyze_partition(coordinator_partition(G), segments, window, None, out)
    assert result.group_generations.schema == GROUP_GENERATIONS
    assert result.rebalances.schema == REBALANCES
    return result


def test_one_generation_per_target_epoch_with_its_assignment(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)
    generations, _ = _analyze(log, tmp_path)
    assert [(g["generation"], g["group_epoch"], g["group_type"], g["protocol_type"],
             g["protocol"], g["member_count"]) for g in generations] == [
        (1, 1, "consumer", "consumer", "uniform", 1), (2, 2, "consumer", "consumer", "uniform", 2),
        (3, 3, "consumer", "consumer", "uniform", 1)]
    second = {m["member_id"]: m for m in generations[1]["members"]}
    # Topic names come from the data directory's partition.metadata.
    assert [(p["topic"], p["partition"]) for p in second["b"]["partitions"]] == [("t", 2),
                                                                                ("t", 3)]
    assert second["b"]["client_id"] == "client-b"
    # a was at epoch 1 when the epoch-2 target was set; b had no current assignment yet.
    assert (second["a"]["member_epoch"], second["b"]["member_epoch"]) == (1, None)


def test_rebalances_count_moves_and_time_to_reconcile(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)
    _, rebalances = _analyze(log, tmp_path)
    assert [(r["from_generation"], r["to_generation"], r["members_joined"], r["members_left"],
             r["partitions_moved"], r["partitions_kept"], r["seconds_since_previous"],
             r["group_type"]) for r in rebalances] == [
        (1, 2, 1, 0, 2, 2, 1.0, "consumer"), (2, 3, 0, 1, 2, 2, 9.0, "consumer")]
    # Epoch 2 was held by both members, Stable, 2 s after it was set; epoch 3 never was in
    # this log (b's move to it is not written yet).
    assert [r["seconds_to_reconcile"] for r in rebalances] == [2.0, None]


def test_history_before_since_builds_the_state_the_window_starts_from(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)
    generations, rebalances = _analyze(log, tmp_path, TimeWindow(since_ms=T + 500))
    assert [g["generation"] for g in generations] == [2, 3]
    assert [(r["from_generation"], r["partitions_moved"]) for r in rebalances] == [(1, 2), (2, 2)]


def test_a_deleted_group_starts_a_new_history(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)
    log.records(G, [(Current(G, "b"), None), (Target(G, "b"), None), (Member(G, "b"), None),
                    (TargetEpoch(G), None), (Epoch(G), None)], T + 20_000)
    log.records(G, [_member("c"), (Epoch(G), EpochValue(1)),
                    (Target(G, "c"), TargetValue(_parts(0, 1, 2, 3))),
                    (TargetEpoch(G), TargetEpochValue(1))], T + 30_000)
    generations, rebalances = _analyze(log, tmp_path)
    assert [g["generation"] for g in generations] == [1, 2, 3, 1]
    assert len(rebalances) == 2  # none from the deleted group's epoch 3 to the new epoch 1


def test_summary_shows_the_consumer_protocol_and_the_group_epochs(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)
    [row] = _result(log, tmp_path).summary.to_pylist()
    assert (row["group"], row["group_type"], row["protocol_type"], row["protocol"]) == (
        G, "consumer", "consumer", "uniform")
    # Target epoch 3 (group epoch 3), b not at it yet; three targets, two rebalances.
    assert (row["generation"], row["group_epoch"], row["generations"], row["rebalances"],
            row["member_count"], row["state"]) == (3, 3, 3, 2, 1, "Reconciling")
    log.records(G, [_current("b", 3, 2, STABLE, (0, 1, 2, 3))], T + 11_000)
    [row] = _result(log, tmp_path / "later").summary.to_pylist()
    assert row["state"] == "Stable"
    log.records(G, [(Current(G, "b"), None), (Target(G, "b"), None), (Member(G, "b"), None),
                    (TargetEpoch(G), None), (Epoch(G), None)], T + 20_000)
    [row] = _result(log, tmp_path / "deleted").summary.to_pylist()
    assert row["state"] == "Dead"


def test_each_target_epoch_has_its_causes(tmp_path: Path) -> None:
    log = OffsetsLogBuilder()
    _two_members_reconcile(log)
    causes = _result(log, tmp_path).rebalance_causes.to_pylist()
    assert [(c["from_generation"], c["to_generation"], c["cause"], c["member_id"],
             c["client_id"]) for c in causes] == [
        (1, 2, "new_member_joined", "b", "client-b"),
        # a was last seen when epoch 2 was set, 9 s before: within its session, so it left.
        (2, 3, "member_left", "a", "client-a")]
    assert causes[1]["silent_seconds"] == 9.0
    assert causes[1]["rebalance_timeout_ms"] == 45_000
