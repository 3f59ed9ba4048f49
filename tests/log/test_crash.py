"""Crash safety: a writer killed with SIGKILL at a random moment loses no acknowledged record."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kgroups.log.batch import iter_records_raw
from kgroups.log.config import LogConfig
from kgroups.log.partition_log import PartitionLog

WRITER = Path(__file__).with_name("crash_writer.py")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_every_acknowledged_record_survives_sigkill(tmp_path: Path, seed: int) -> None:
    directory = tmp_path / "t-0"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, str(WRITER), str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline()  # the writer is up and acknowledging
    assert first.strip().isdigit(), child.stderr.read() if child.stderr else ""
    time.sleep(random.Random(seed).uniform(0.05, 0.6))
    child.send_signal(signal.SIGKILL)
    remaining, _ = child.communicate()
    acknowledged = [int(line) for line in (first + remaining).split()]
    assert acknowledged

    log = PartitionLog.open(directory, LogConfig(segment_bytes=4096, index_interval_bytes=256))
    assert log.log_end_offset > max(acknowledged)
    present = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        records = list(iter_records_raw(log.read(offset, 1 << 16)))
        for record_offset, _ts, key, value in records:
            present[record_offset] = (key, value)
        offset = records[-1][0] + 1
    assert sorted(present) == list(range(log.log_end_offset))
    for last in acknowledged:
        for record_offset in range(last - 2, last + 1):
            key, value = present[record_offset]
            assert value is not None and key == b"t" + value.split(b"-")[0]
