"""The brokers broker tests talk to: a real `kgroups serve` subprocess (`ServerProcess`), and an
in-process broker (`InProcessBroker`), with their fixtures.

Interop tests need a separate process (clients, kill -9, restarts); the in-process broker runs on
its own event-loop thread so plain synchronous tests can talk to it over a socket quickly. A
module of its own, not only conftest.py, so that other test directories (tests/tools,
tests/differential, tests/kafka_harness.py) import the same classes and fixtures by name.
"""


from __future__ import annotations

import asyncio
import io
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from kio.serial import entity_writer

from kgroups.broker import wire
from kgroups.broker.broker import Broker
from kgroups.broker.config import BrokerConfig
from kgroups.broker.fast_writer import Encoder, entity_encoder

STARTUP_TIMEOUT_S = 60.0
T = TypeVar("T")


@dataclass
class ServerProcess:
    """A `kgroups serve` subprocess; `start()` after `stop()`/`kill()` keeps its port and data
    directory, so clients reconnect to the same address."""

    data_dir: Path
    log_path: Path
    overrides: Sequence[str] = ()
    host: str = "127.0.0.1"
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "kgroups.cli", "serve", "--host", self.host,
                   "--port", str(self.port), "--data-dir", str(self.data_dir)]
        for override in self.overrides:
            command += ["--override", override]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log)
        log.close()
        try:
            self.port = self._wait_listening()
        except BaseException:
            self.close()  # one that hangs at start must not outlive the test that started it
            raise

    def _wait_listening(self) -> int:
        assert self.process is not None and self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while time.monotonic() < deadline:
                if selector.select(timeout=0.5):
                    line = self.process.stdout.readline().decode()
                    if line.startswith("listening "):
                        return int(line.rsplit(":", 1)[1])
                    if not line and self.process.poll() is not None:
                        break
        raise RuntimeError(f"kgroups serve did not start; log:\n{self.log_text()}")

    def network_processes(self) -> list[psutil.Process]:
        """Its live network processes (num.network.threads), children of the broker process;
        one killed and not reaped yet (a zombie, whose command line cannot be read) is not."""
        assert self.process is not None
        found = []
        for child in psutil.Process(self.process.pid).children():
            try:
                if "kgroups.broker.net.network_front" in " ".join(child.cmdline()):
                    found.append(child)
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                continue
        return found

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int:
        """SIGTERM and wait: the graceful shutdown path."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        """SIGKILL: nothing after the last fsync may be assumed written."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def start_kgroups_server(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Factory: `start_kgroups_server("num.partitions=3")` -> a running ServerProcess."""
    servers: list[ServerProcess] = []

    def start(*overrides: str) -> ServerProcess:
        index = len(servers)
        server = ServerProcess(tmp_path / f"data-{index}", tmp_path / f"server-{index}.log",
                               overrides)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def kgroups_server(start_kgroups_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_kgroups_server()


@dataclass
class InProcessBroker:
    """A Broker on an event loop in a background thread, for fast socket-level tests."""

    broker: Broker
    loop: asyncio.AbstractEventLoop

    @property
    def port(self) -> int:
        return self.broker.port

    def call(self, coroutine_function: Callable[[], Awaitable[T]]) -> T:
        """Run `coroutine_function()` on the broker's loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine_function(), self.loop)  # type: ignore[arg-type]
        return future.result(timeout=30)


def _cross_checked_encoder(entity: type[Any]) -> Encoder:
    """The broker's generated encoder, verified against kio's reference writer on every call."""
    fast, reference = entity_encoder(entity), entity_writer(entity)

    def encode(value: Any, out: list[Any]) -> None:
        expected = io.BytesIO()
        reference(expected, value)
        start = len(out)
        fast(value, out)
        written = b"".join(out[start:])
        assert written == expected.getvalue(), f"fast writer differs from kio for {entity}"

    return encode


@pytest.fixture
def make_inprocess_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., InProcessBroker]]:
    """In-process brokers whose every response (and every test request) is encoded twice, by
    the fast writer and by kio's, and must come out byte-identical."""
    monkeypatch.setattr(wire, "_encoder", _cross_checked_encoder)
    started: list[tuple[InProcessBroker, threading.Thread]] = []

    def make(*overrides: str) -> InProcessBroker:
        config = BrokerConfig.build(port=0, data_dir=tmp_path / f"inproc-{len(started)}",
                                    overrides=overrides)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        async def create() -> Broker:
            broker = Broker(config)
            await broker.start()
            return broker

        broker = asyncio.run_coroutine_threadsafe(create(), loop).result(timeout=30)
        handle = InProcessBroker(broker, loop)
        started.append((handle, thread))
        return handle

    yield make
    for handle, thread in started:
        asyncio.run_coroutine_threadsafe(handle.broker.stop(), handle.loop).result(timeout=30)
        handle.loop.call_soon_threadsafe(handle.loop.stop)
        thread.join(timeout=10)
        handle.loop.close()


@pytest.fixture
def inprocess_broker(make_inprocess_broker: Callable[..., InProcessBroker]) -> InProcessBroker:
    return make_inprocess_broker()
