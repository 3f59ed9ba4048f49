"""File descriptors per partition: kgroups beside Apache Kafka 4.3.1, read from /proc/PID/fd.

Each broker starts under `ulimit -n` SOFT:HARD (set in the child before exec), with one
`__consumer_offsets` partition; then topics of 100 partitions are created, one at a time, until
TOTAL partitions exist, and after each the broker process's open descriptors are counted by what
they point at (segment .log files, .index/.timeindex files, sockets, the rest). Kafka's indexes
are memory-mapped, so its mappings of index files (/proc/PID/maps) are counted too: they hold
no descriptor but count against vm.max_map_count. It also prints the broker's "Max open files"
from /proc/PID/limits, which shows whether it raised its soft limit (the JVM does, to the hard
limit). kgroups' network process holds the client sockets, not partitions; its count is printed
apart.

With --exhaust N each broker then gets one more topic of N partitions (more than its limit
allows); its answer is printed, then 70 s later whether the broker still runs and answers a
CreateTopics of one partition, and its log lines about it.

Run: .venv/bin/python bench/descriptors.py [--total 400] [--soft 1024] [--hard 4096]
     [--kafka] [--no-kgroups] [--exhaust N]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

# The brokers' harnesses live with the tests (they start the same brokers).
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from kio.schema.create_topics.v7 import request as create_topics
from tests.broker.servers import ServerProcess
from tests.kafka_harness import KafkaBroker

from kgroups.tools.wire_client import KafkaWireClient, WireError

STEP = 100


@contextlib.contextmanager
def limited(soft: int, hard: int) -> Iterator[None]:
    """Children started meanwhile get RLIMIT_NOFILE soft:hard."""
    real = subprocess.Popen

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        kwargs["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        return real(*args, **kwargs)  # type: ignore[call-overload, no-any-return]

    subprocess.Popen = popen  # type: ignore[misc]
    try:
        yield
    finally:
        subprocess.Popen = real  # type: ignore[misc]


def classify(pid: int) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for entry in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{entry}")
        except OSError:
            continue
        if target.endswith(".log"):
            kinds["segment .log"] += 1
        elif target.endswith((".index", ".timeindex", ".txnindex")):
            kinds["index"] += 1
        elif target.startswith("socket:"):
            kinds["socket"] += 1
        else:
            kinds["other"] += 1
    kinds["total"] = sum(kinds.values())
    with open(f"/proc/{pid}/maps") as maps:
        kinds["mapped index files"] = sum(
            1 for line in maps if line.rstrip().endswith((".index", ".timeindex")))
    return kinds


def settled(pid: int) -> Counter[str]:
    """The count once it stopped moving for a second: Kafka's broker opens the logs of a
    topic its controller created when it applies the metadata, after CreateTopics answered."""
    last = classify(pid)
    while True:
        time.sleep(1)
        now = classify(pid)
        if now == last:
            return now
        last = now


def max_open_files(pid: int) -> str:
    with open(f"/proc/{pid}/limits") as limits:
        line = next(line for line in limits if line.startswith("Max open files"))
    return " ".join(line.split()[3:5])


def create(port: int, name: str, partitions: int) -> int:
    with KafkaWireClient("127.0.0.1", port, client_id="descriptors", timeout=60) as client:
        (result,) = client.call(create_topics.CreateTopicsRequest(
            topics=(create_topics.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                configs=()),),
            timeout=datetime.timedelta(seconds=30), validate_only=False)).topics
    return int(result.error_code)


def measure(name: str, pid: int, port: int, total: int,
            extra: Callable[[], str] = lambda: "") -> None:
    print(f"{name}: Max open files (soft hard) {max_open_files(pid)}")
    base = classify(pid)
    print(f"  {'partitions':>10} {'total fds':>9} {'.log':>5} {'index':>5} {'socket':>6} "
          f"{'other':>5} {'mapped idx':>10} {'fds/partition':>13}{extra() and '  ' + extra()}")
    created = 0
    while created < total:
        error = create(port, f"fds-{created}", STEP)
        if error:
            print(f"  creating {STEP} more partitions failed: error {error}")
            break
        created += STEP
        now = settled(pid)
        per = (now["total"] - base["total"]) / created
        print(f"  {created:>10} {now['total']:>9} {now['segment .log']:>5} {now['index']:>5} "
              f"{now['socket']:>6} {now['other']:>5} {now['mapped index files']:>10} "
              f"{per:>13.2f}{extra() and '  ' + extra()}")


def exhaust(port: int, partitions: int, alive: Callable[[], bool],
            log: Callable[[], str]) -> None:
    try:
        error = create(port, "exhaust", partitions)
        print(f"  CreateTopics of {partitions} partitions: error {error}")
    except (OSError, WireError) as exc:
        print(f"  CreateTopics of {partitions} partitions: {exc!r}")
    time.sleep(70)  # past Kafka's recovery-point checkpoint (every 60 s by default)
    print(f"  70 s later: running {alive()}", end="")
    try:
        print(f", CreateTopics of 1 partition: error {create(port, 'after', 1)}")
    except (OSError, WireError) as exc:
        print(f", CreateTopics of 1 partition: {exc!r}")
    for line in log().splitlines():
        if any(word in line for word in ("ERROR", "Too many open files", "exited")):
            print("   ", line[:200])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=400)
    parser.add_argument("--soft", type=int, default=1024)
    parser.add_argument("--hard", type=int, default=4096)
    parser.add_argument("--kafka", action="store_true")
    parser.add_argument("--no-kgroups", action="store_true")
    parser.add_argument("--exhaust", type=int, default=0)
    args = parser.parse_args()
    print(f"ulimit -n {args.soft}:{args.hard}; load average {Path('/proc/loadavg').read_text()}")
    with tempfile.TemporaryDirectory() as workdir:
        root = Path(workdir)
        if not args.no_kgroups:
            server = ServerProcess(root / "kgroups", root / "kgroups.log",
                                   ("offsets.topic.num.partitions=1",))
            with limited(args.soft, args.hard):
                server.start()
            try:
                assert server.process is not None
                network = server.network_processes()
                measure("kgroups", server.process.pid, server.port, args.total,
                        lambda: "network process fds " + ",".join(
                            str(len(os.listdir(f"/proc/{p.pid}/fd"))) for p in network))
                if args.exhaust:
                    process = server.process
                    exhaust(server.port, args.exhaust,
                            lambda: process.poll() is None, server.log_text)
            finally:
                server.close()
        if args.kafka:
            kafka = KafkaBroker(root / "kafka")
            with limited(args.soft, args.hard):
                kafka.start()
            try:
                assert kafka.process is not None
                measure("Kafka 4.3.1", kafka.process.pid, kafka.port, args.total)
                if args.exhaust:
                    jvm = kafka.process
                    exhaust(kafka.port, args.exhaust, lambda: jvm.poll() is None,
                            lambda: kafka.log_text()
                            + (kafka.workdir / "console.out").read_text(errors="replace"))
            finally:
                kafka.close()


if __name__ == "__main__":
    main()
