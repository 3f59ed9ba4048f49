"""`serve_in_background`: a kgroups Broker in a daemon thread, ready when the context opens.

"Ready" means what a client needs to use groups at once: the listener is bound and the group
coordinator has loaded `__consumer_offsets` (a fresh data dir loads in a few milliseconds), so
the first FindCoordinator does not answer COORDINATOR_LOAD_IN_PROGRESS."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kgroups.broker.broker import Broker
from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.broker.kafka_settings import kafka_settings

# Kafka's defaults suit a production cluster; these suit a test. The first group join would
# otherwise wait group.initial.rebalance.delay.ms (3 s), and one __consumer_offsets partition
# instead of 50 keeps the data dir and the start small. A test's own settings go over these.
TEST_SETTINGS: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
}
# How long `serve_in_background` waits for the broker to stop before leaving the thread behind.
STOP_TIMEOUT_S = 30.0


@dataclass
class BackgroundBroker:
    """A running broker: where to reach it (`bootstrap`, `host`, `port`), where its logs are
    (`data_dir`), the settings it runs with, and how long it took to become ready. `broker` is
    the Broker itself, for looking at its state; its event loop runs on another thread, so
    calling into it from the test is not safe."""

    host: str
    port: int
    data_dir: Path
    settings: Mapping[str, str]
    start_seconds: float
    broker: Broker = field(repr=False)

    @property
    def bootstrap(self) -> str:
        """The `bootstrap.servers` value for a client."""
        return f"{self.host}:{self.port}"


def _check_names(config: BrokerConfig) -> None:
    """Refuse a setting name neither kgroups nor Kafka knows, with the closest known one: a
    test that sets it expects an effect it would silently not get (`kgroups serve`, which an
    operator watches, prints the same line as a warning). A Kafka setting kgroups does not use
    is warned about, as `kgroups serve` does; a strict suite (`-W error`) fails on it too."""
    typos = []
    for key, message in config.unread_settings().items():
        if key in kafka_settings():
            warnings.warn(f"kgroups: {message}", UserWarning, stacklevel=4)
        else:
            typos.append(message)
    if typos:
        raise ConfigError(" ".join(typos))


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class _BrokerThread(threading.Thread):
    """Runs one Broker on its own event loop until `stop()`; `ready` is set once it serves
    (or failed to start, with the error in `error`)."""

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(name=f"kgroups-broker-{config.port or 'auto'}", daemon=True)
        self.config = config
        self.broker: Broker | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    def run(self) -> None:
        # asyncio.Runner shuts down as asyncio.run does: every task still pending is cancelled
        # and awaited, then async generators and the default executor are shut down, and only
        # then is the loop closed (a task or socket left behind would be reported at garbage
        # collection, and uvloop refuses to close a loop with open handles: EBUSY).
        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                self._loop = runner.get_loop()
                runner.run(self._serve())
        except BaseException as exc:  # reported to the starting or the stopping thread
            self.error = exc
        finally:
            self.ready.set()

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        broker = Broker(self.config)
        try:
            await broker.start()
            await broker.coordinator.wait_loaded()
            self.broker = broker
            self.ready.set()
            await self._stop_event.wait()
        finally:
            await broker.stop()

    def stop(self) -> None:
        """Stop the broker and wait for the thread; a broker that served and then failed to
        stop cleanly raises here, in the test, rather than as an unhandled thread exception."""
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop_event.set)
        self.join(STOP_TIMEOUT_S)
        if self.broker is not None and self.error is not None:
            raise RuntimeError(f"kgroups broker on port {self.broker.port} did not stop "
                               f"cleanly: {self.error!r}") from self.error


@contextlib.contextmanager
def serve_in_background(
    settings: Mapping[str, str] | None = None,
    *,
    data_dir: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout: float = 30.0,
) -> Iterator[BackgroundBroker]:
    """Run a kgroups broker for the duration of the `with` block.

    `settings` are Kafka broker settings (server.properties keys) applied over TEST_SETTINGS;
    pass `{"group.initial.rebalance.delay.ms": "3000"}` to get Kafka's default back. With no
    `data_dir` the logs go to a temporary directory removed afterwards; with one, they stay,
    and a later broker on the same directory finds the groups and offsets again. Port 0 (the
    default) takes a free port. Raises ConfigError for a bad setting or a name neither kgroups nor
    Kafka has ("... Did you mean 'offsets.retention.minutes'?"), warns about a Kafka setting
    kgroups does not use, and raises OSError when the port cannot be bound, before the block
    runs.
    """
    merged = {**TEST_SETTINGS, **(settings or {})}
    with contextlib.ExitStack() as cleanup:
        if data_dir is None:
            data_dir = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="kgroups-"))
        config = BrokerConfig.build(host=host, port=port, data_dir=Path(data_dir),
                                    overrides=[f"{key}={value}" for key, value in merged.items()])
        _check_names(config)
        began = time.monotonic()
        thread = _BrokerThread(config)
        thread.start()
        cleanup.callback(thread.stop)
        if not thread.ready.wait(startup_timeout):
            raise TimeoutError(f"kgroups broker not ready in {startup_timeout} s")
        if thread.error is not None or thread.broker is None:
            raise thread.error or RuntimeError("kgroups broker stopped while starting")
        broker = thread.broker
        yield BackgroundBroker(host=broker.host, port=broker.port, data_dir=Path(data_dir),
                               settings=merged, start_seconds=time.monotonic() - began,
                               broker=broker)

