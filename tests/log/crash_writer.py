"""Child process of the crash test: appends batches from concurrent tasks and prints the last
offset of each batch once `GroupCommit` says it is durable. The parent kills it with SIGKILL."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from kgroups.log.batch import build_batch
from kgroups.log.config import LogConfig
from kgroups.log.durability import GroupCommit
from kgroups.log.partition_log import PartitionLog


async def writer(log: PartitionLog, commit: GroupCommit, task: int) -> None:
    sequence = 0
    while True:
        records = [(b"t%d" % task, b"%d-%d-%d" % (task, sequence, n), n) for n in range(3)]
        _base, last = log.append_batch(build_batch(records))
        sequence += 1
        await commit.wait_durable(log)
        sys.stdout.write(f"{last}\n")
        sys.stdout.flush()


async def main(directory: Path) -> None:
    log = PartitionLog.open(directory, LogConfig(segment_bytes=4096, index_interval_bytes=256))
    commit = GroupCommit()
    await asyncio.gather(*(writer(log, commit, task) for task in range(4)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
