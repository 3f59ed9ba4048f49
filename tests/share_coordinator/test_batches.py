"""The share coordinator's batch merge: Kafka 4.3.1's own PersisterStateBatchCombiner (run by
BatchCombinerOracle.java on Kafka's jars) judges kgroups' on thousands of seeded random inputs
(overlapping, touching, nested, duplicated batches, start offsets cutting through them), and the
merged batches never overlap, come in order and start at the start offset."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from kafka_harness import kafka_classpath
from kgroups.records.share_state import StateBatch
from kgroups.share_coordinator.batches import combine

ORACLE_SOURCE = Path(__file__).with_name("BatchCombinerOracle.java")
Case = tuple[int, tuple[StateBatch, ...], tuple[StateBatch, ...]]


def test_an_acknowledged_range_splits_an_available_one() -> None:
    merged = combine((), (StateBatch(10, 15, 0, 1), StateBatch(12, 13, 2, 1)), 10)
    assert merged == (StateBatch(10, 11, 0, 1), StateBatch(12, 13, 2, 1),
                      StateBatch(14, 15, 0, 1))


def test_the_higher_delivery_count_wins_and_the_start_offset_cuts() -> None:
    so_far = (StateBatch(0, 9, 0, 1),)
    new = (StateBatch(3, 4, 2, 2), StateBatch(4, 12, 0, 3))
    assert combine(so_far, new, 5) == (StateBatch(5, 12, 0, 3),)
    assert combine(so_far, new, -1) == (StateBatch(0, 2, 0, 1), StateBatch(3, 3, 2, 2),
                                        StateBatch(4, 12, 0, 3))


def test_touching_batches_of_one_state_join_and_duplicates_count_once() -> None:
    batches = (StateBatch(0, 4, 2, 1), StateBatch(5, 9, 2, 1), StateBatch(5, 9, 2, 1))
    assert combine(batches, (), -1) == (StateBatch(0, 9, 2, 1),)


def _random_batches(rng: random.Random) -> tuple[StateBatch, ...]:
    batches = []
    for _ in range(rng.randint(0, 5)):
        first = rng.randint(0, 40)
        batches.append(StateBatch(first, first + rng.randint(0, 12), rng.choice((0, 2, 4)),
                                  rng.randint(1, 4)))
    return tuple(batches)


def _cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    return [(rng.choice((-1, 0, rng.randint(0, 50))), _random_batches(rng),
             _random_batches(rng)) for _ in range(count)]


@pytest.mark.parametrize("seed", range(3))
def test_merged_batches_never_overlap_and_keep_every_offset_past_the_start(seed: int) -> None:
    for start, so_far, new in _cases(500, seed):
        merged = combine(so_far, new, start)
        assert all(b.first_offset <= b.last_offset for b in merged)
        assert all(a.last_offset < b.first_offset for a, b in itertools.pairwise(merged))
        covered = {o for b in (*so_far, *new) for o in range(b.first_offset, b.last_offset + 1)
                   if o >= start}
        assert {o for b in merged for o in range(b.first_offset, b.last_offset + 1)} == covered


def _text(batches: tuple[StateBatch, ...]) -> str:
    return " ".join(f"{b.first_offset},{b.last_offset},{b.delivery_state},{b.delivery_count}"
                    for b in batches)


@pytest.fixture(scope="module")
def oracle_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("javac is not installed")
    classes = tmp_path_factory.mktemp("combiner-oracle")
    subprocess.run([javac, "-d", str(classes), "-cp", kafka_classpath(), str(ORACLE_SOURCE)],
                   check=True, capture_output=True, timeout=120)
    return classes


@pytest.mark.kafka
def test_kafka_merges_batches_exactly_as_kgroups(oracle_classes: Path) -> None:
    cases = _cases(3000, 26)
    lines = "".join(f"{start};{_text(so_far)};{_text(new)}\n" for start, so_far, new in cases)
    result = subprocess.run(
        ["java", "-cp", f"{oracle_classes}{os.pathsep}{kafka_classpath()}",
         "BatchCombinerOracle"], input=lines, capture_output=True, text=True, check=True,
        timeout=300)
    answers = result.stdout.splitlines()
    assert len(answers) == len(cases)
    mismatches = [(case, answer, _text(combine(case[1], case[2], case[0])))
                  for case, answer in zip(cases, answers, strict=True)
                  if answer != _text(combine(case[1], case[2], case[0]))]
    assert mismatches == []
