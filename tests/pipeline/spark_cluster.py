"""A Spark standalone cluster on 127.0.0.1 for the pipeline tests: one master and N workers, each
its own JVM (started with the `spark-class` launcher pyspark ships) and its own work directory,
as `start-master.sh` / `start-worker.sh` would run them on separate machines.

`SparkStandalone(workdir, workers=2).start()` returns once every worker has registered with the
master (`start_in_background()` does the same on a thread, so a test can prepare its data
meanwhile, and `wait_started()` joins it); `master_url` is the `--master` for a driver; `stop()`
ends the JVMs it started. Each
worker offers one core and `worker_memory`; a driver must ask for executors that fit
(SPARK_EXECUTOR_MEMORY / spark.executor.memory). The environment given to `start()` is the
workers' and so their executors': executors do not inherit the driver's environment."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

STARTUP_TIMEOUT_S = 90.0
# The daemons schedule and launch executors; nothing in them is hot.
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DAEMON_MEMORY = "256m"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SparkStandalone:
    workdir: Path
    workers: int = 2
    worker_memory: str = "768m"
    port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _starter: threading.Thread | None = field(default=None, repr=False)
    _start_error: BaseException | None = field(default=None, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def _launch(self, name: str, args: list[str], env: Mapping[str, str]) -> None:
        spark_home = Path(pyspark.__file__).parent
        log = self.log_path(name).open("wb")
        self.processes.append(subprocess.Popen(
            [str(spark_home / "bin" / "spark-class"), *args],
            env={**os.environ, **env, "SPARK_HOME": str(spark_home),
                 "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
                 "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                 "SPARK_LOG_DIR": str(self.workdir)},
            stdout=log, stderr=subprocess.STDOUT))
        log.close()

    def _wait_for(self, name: str, text: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            log = self.log_path(name).read_text(errors="replace")
            if text in log:
                return
            if any(process.poll() is not None for process in self.processes):
                break
            time.sleep(0.1)
        raise RuntimeError(f"Spark {name} did not log {text!r}:\n"
                           f"{self.log_path(name).read_text(errors='replace')[-5000:]}")

    def start(self, env: Mapping[str, str] | None = None) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port()
        env = dict(env or {})
        try:
            self._launch("master", ["org.apache.spark.deploy.master.Master", "--host",
                                    "127.0.0.1", "--port", str(self.port), "--webui-port", "0"],
                         env)
            self._wait_for("master", "I have been elected leader")
            for number in range(self.workers):
                work_dir = self.workdir / f"worker-{number}"
                work_dir.mkdir(exist_ok=True)
                self._launch(f"worker-{number}", [
                    "org.apache.spark.deploy.worker.Worker", self.master_url,
                    "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                    "--cores", "1", "--memory", self.worker_memory,
                    "--work-dir", str(work_dir)], env)
            for number in range(self.workers):
                self._wait_for(f"worker-{number}", "Successfully registered with master")
        except BaseException:
            self.stop()
            raise

    def start_in_background(self, env: Mapping[str, str] | None = None) -> None:
        def start() -> None:
            try:
                self.start(env)
            except BaseException as exc:  # re-raised by wait_started, in the test's thread
                self._start_error = exc

        self._starter = threading.Thread(target=start, name="spark-standalone", daemon=True)
        self._starter.start()

    def wait_started(self) -> None:
        assert self._starter is not None
        self._starter.join()
        if self._start_error is not None:
            raise self._start_error

    def stop(self) -> None:
        if self._starter is not None:
            self._starter.join()
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        self.processes.clear()
