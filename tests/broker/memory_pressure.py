"""Clients that try to make a broker hold memory, and an RSS sampler, for the memory-budget
tests and bench/memory_budget.py.

Each hostile client runs in its own thread with a plain socket, so the test process never
buffers much itself: the never-reading fetcher pipelines Fetch requests and reads nothing, the
trickler announces a huge frame, sends most of it as fast as the broker takes it, then one byte
at a time. The healthy client makes Metadata round trips and records how long each took.
"""

from __future__ import annotations

import abc
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import psutil
from broker_wire_helpers import (
    connect,
    create_topic,
    fetch_request,
    metadata_request,
    produce_request,
)

from kgroups.broker.wire import encode_request
from kgroups.log.batch import build_batch
from kgroups.tools.wire_client import WireError

MIB = 1 << 20


def fill_topic(port: int, topic: str, megabytes: int, *, create: bool = True) -> None:
    """`megabytes` MiB of 64 KiB records in one partition, so a Fetch of offset 0 with a 1 MiB
    limit is answered with about 1 MiB."""
    value = b"v" * (64 * 1024 - 64)
    with connect(port) as client:
        if create:
            create_topic(client, topic)
        for _ in range(megabytes):
            batch = build_batch([(b"k", value, 1_700_000_000_000)] * 15)
            client.call(produce_request(topic, 0, batch))
        # The broker's first Fetch answer loads and compiles its writers: part of the baseline.
        client.call(fetch_request(topic, 0, 0, max_bytes=MIB))


def _open(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    return sock


def _send_some(sock: socket.socket, data: memoryview) -> int:
    """Bytes the kernel took now (0 when its buffer is full); raises once the broker closed."""
    try:
        return sock.send(data)
    except BlockingIOError:
        return 0


@dataclass
class Hostile(abc.ABC):
    """A hostile client thread; `closed_by_broker` says whether the broker hung up on it."""

    port: int
    stop: threading.Event = field(default_factory=threading.Event)
    sent: int = 0
    closed_by_broker: bool = False
    error: OSError | None = None
    thread: threading.Thread | None = None

    def start(self) -> Hostile:
        self.thread = threading.Thread(target=self._guarded, daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)

    def _guarded(self) -> None:
        try:
            with contextlib.closing(_open(self.port)) as sock:
                self.run(sock)
        except OSError as exc:
            self.closed_by_broker = True
            self.error = exc

    @abc.abstractmethod
    def run(self, sock: socket.socket) -> None:
        """Misbehave on `sock` until `stop` is set."""


@dataclass
class NeverReadingFetcher(Hostile):
    """Pipelines Fetch requests of `topic` from offset 0 and never reads an answer."""

    topic: str = "t"

    def run(self, sock: socket.socket) -> None:
        frames = memoryview(b"".join(
            encode_request(i, "hog", fetch_request(self.topic, 0, 0, max_bytes=MIB))
            for i in range(64)))
        pending = frames
        while not self.stop.is_set():
            written = _send_some(sock, pending)
            self.sent += written
            pending = pending[written:] or frames
            if not written:
                time.sleep(0.01)
                _raise_if_closed(sock)


@dataclass
class LongPollFetcher(Hostile):
    """Sends `count` Fetches of `offset`, the end of `topic`, that wait up to a minute for
    data, then reads nothing: one append wakes them all at once."""

    topic: str = "t"
    offset: int = 0
    count: int = 500

    def run(self, sock: socket.socket) -> None:
        pending = memoryview(b"".join(
            encode_request(i, "poll", fetch_request(self.topic, 0, self.offset,
                                                    max_wait_ms=60_000, max_bytes=MIB))
            for i in range(self.count)))
        while not self.stop.is_set():
            written = _send_some(sock, pending)
            self.sent += written
            pending = pending[written:]
            if not written:
                time.sleep(0.05)
                _raise_if_closed(sock)


@dataclass
class FrameTrickler(Hostile):
    """Announces a `size`-byte request frame, sends all of it but its last `tail` bytes as fast
    as the broker accepts them, then one byte per `interval` seconds: the frame does not
    complete while the test runs."""

    size: int = 100 * MIB
    tail: int = 64 * 1024
    interval: float = 0.2

    def run(self, sock: socket.socket) -> None:
        header = struct.pack(">ihhi", self.size, 3, 12, 1)
        zeros = memoryview(bytes(min(self.size, 4 * MIB)))
        pending, left = memoryview(header), self.size + 4 - len(header)
        while not self.stop.is_set():
            if not pending:
                if left <= self.tail:
                    break
                pending = zeros[:min(len(zeros), left - self.tail)]
                left -= len(pending)
            written = _send_some(sock, pending)
            self.sent += written
            pending = pending[written:]
            if not written:
                time.sleep(0.01)
                _raise_if_closed(sock)
        while not self.stop.wait(self.interval):
            self.sent += sock.send(b"\0")
            _raise_if_closed(sock)


_TCP_ESTABLISHED = 1  # tcpi_state, the first byte of Linux's struct tcp_info


def _raise_if_closed(sock: socket.socket) -> None:
    """A client that never reads still notices the broker's FIN or RST (its unread answers
    would hide an end of stream from recv, so the kernel's TCP state is asked instead)."""
    if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != _TCP_ESTABLISHED:
        raise ConnectionResetError("closed by the broker")


@dataclass
class HealthyClient:
    """Metadata round trips in a loop; `worst` is the slowest, `failures` counts errors."""

    port: int
    stop: threading.Event = field(default_factory=threading.Event)
    calls: int = 0
    failures: int = 0
    worst: float = 0.0
    thread: threading.Thread | None = None

    def start(self) -> HealthyClient:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)

    def _run(self) -> None:
        with connect(self.port) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    client.call(metadata_request(all_topics=True))
                except (WireError, OSError):
                    self.failures += 1
                    return
                self.calls += 1
                self.worst = max(self.worst, time.monotonic() - started)
                time.sleep(0.05)


@dataclass
class RssSampler:
    """Samples a process's resident set size every few milliseconds in a thread."""

    pid: int
    peak: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._process = psutil.Process(self.pid)

    def rss(self) -> int:
        return int(self._process.memory_info().rss)

    def start(self) -> RssSampler:
        self.peak = self.rss()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(0.005):
            self.peak = max(self.peak, self.rss())

    def close(self) -> int:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        return self.peak

    def settled(self, seconds: float = 3.0) -> int:
        """RSS once it stops falling (freed memory may take a moment to be handed back)."""
        deadline = time.monotonic() + seconds
        lowest = self.rss()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            lowest = min(lowest, self.rss())
        return lowest
