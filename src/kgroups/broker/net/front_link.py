"""The broker process's side of the network process: starts it, serves what it relays.

With `num.network.threads` above 0, `kgroups serve` binds its listeners itself and hands the
listening sockets to that many network processes (`network_front`). They accept clients, run
TLS, read and size-check frames against the memory budget, and write answers; this process
decides everything else exactly as for a socket of its own: admission (max.connections,
max.connection.creation.rate), SASL, ACLs, every check and handler (`request_intake`). Each
relayed connection here is a `RelayedConnection`: frames in, answers out in request order,
and a CLOSE when the rules close it (the close is logged here, once).

A network process that dies is started again, after a wait that doubles from half a second to
ten while starts keep failing (say the broker process is out of file descriptors for the
channel), and each exit and restart is counted (`network-process` in
kgroups.broker.background.TaskCounts); its clients reconnect, as they would after any dropped
connection. A relayed frame or event that fails here (a handler module that cannot be imported
while descriptors are exhausted) closes that one client's connection, never the channel: the
channel is every client's. Stopping the broker closes the channels, which ends the processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from kgroups.broker.background import Backoff, describe
from kgroups.broker.events import log_event
from kgroups.broker.net.connection import Refusal
from kgroups.broker.net.fair_frames import FairFrames
from kgroups.broker.net.relay_channel import Channel, Kind
from kgroups.broker.net.request_intake import (
    failed_request,
    failed_session,
    framed,
    request_work,
)
from kgroups.broker.security.state import Security, Session, new_session

if TYPE_CHECKING:
    from kgroups.broker.apis.contract import HandlerServices, RequestContext
    from kgroups.broker.security.listeners import Listener

logger = logging.getLogger("kgroups.server")
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
TASK_NAME = "network-process"


class Admission(Protocol):
    """The broker's connection limits, shared with its own sockets (server.BrokerServer)."""

    def admit(self, listener: Listener) -> Awaitable[None]: ...
    def hold(self, host: str, peer: str) -> bool: ...
    def release(self, host: str) -> None: ...


class RelayedConnection:
    """A client connection the network process holds: its frames run here and their answers
    go back in request order.

    Answers count against this process's memory budget from their computation until the
    network process reports that the kernel took them (TAKEN), and a handler starts only when
    the budget has room, as for a socket of this process's own: a client that never reads its
    Fetch answers cannot make this process compute more of them than the budget holds."""

    def __init__(self, broker: HandlerServices, session: Session, host: str, peer: str,
                 channel: Channel, connection_id: int, end: Callable[[], None]) -> None:
        self.session = session
        self.host = host
        self.peer = peer
        self._broker = broker
        self._budget = broker.memory
        self._channel = channel
        self._id = connection_id
        self._end = end
        self._loop = asyncio.get_running_loop()
        self._in_flight: deque[asyncio.Future[bytes | None]] = deque()
        self._closed = False
        self._untaken = 0  # answer bytes sent to the network process, not yet taken by the kernel
        self._counted: set[asyncio.Future[bytes | None]] = set()  # answers counted by _dispatch
        # A SASL client yet to authenticate: the network process limits its frames until told.
        self._authenticating = not session.authenticated

    def taken(self, count: int) -> None:
        self._untaken -= count
        self._account()

    def _account(self) -> None:
        if not self._closed:
            self._budget.set_held(self, self._untaken)

    def evict(self, held: int, total: int, limit: int) -> None:
        """The memory budget stayed exhausted and this connection holds the most: the network
        process drops its unsent answers and resets the connection."""
        if self._closed:
            return
        log_event(logger, logging.WARNING, "connection_closed", peer=self.peer,
                  reason="memory_budget", held=held, total=total, limit=limit)
        self._channel.send(Kind.ABORT, self._id)
        self.gone()

    async def _dispatch(self, handler: Any, ctx: RequestContext, body: Any) -> bytes | None:
        budget = self._budget
        if not budget.allows(0, not self._untaken):
            await budget.wait_for(lambda: self._closed or budget.allows(0, not self._untaken))
        data = framed(ctx, await handler(ctx, body))
        if data:  # at once, before the next handler checks the budget
            self._untaken += len(data)
            self._account()
            self._counted.add(asyncio.current_task(self._loop))  # type: ignore[arg-type]
        return data

    def frame(self, payload: bytes) -> None:
        try:
            # Every relayed request gets a task (its answer is counted by the task that
            # computed it); only the broker process's own sockets run some at once.
            work, _ = request_work(self._broker, self.session, self.host, self.peer, payload,
                                   self._dispatch)
        except Refusal as refusal:
            self.close(logging.WARNING, refusal.reason, **refusal.fields)
            return
        except Exception as error:  # its schema could not be loaded (EMFILE), say
            level, reason, fields = failed_request(error, self.peer)
            self.close(level, reason, **fields)
            return
        task = self._loop.create_task(work)
        self._in_flight.append(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Future[bytes | None]) -> None:
        """A request is done: its answer counts (if its handler did not count it already), even
        while an earlier request still holds the line; then the answers ready at the head are
        sent, in request order."""
        if task in self._counted:
            self._counted.discard(task)
        elif not task.cancelled() and task.exception() is None:
            data = task.result()
            if data:  # a raw SASL token's, an ApiVersions' (no _dispatch counted them)
                self._untaken += len(data)
                self._account()
        in_flight = self._in_flight
        while in_flight and in_flight[0].done():
            head = in_flight.popleft()
            if head.cancelled():
                continue
            error = head.exception()
            if error is not None:
                level, reason, fields = failed_request(error, self.peer)
                self.close(level, reason, **fields)
                return
            if self._authenticating and self.session.authenticated:
                self._authenticating = False
                self._channel.send(Kind.AUTHENTICATED, self._id)
            self._channel.send(Kind.ANSWER, self._id, head.result() or b"")
            close = failed_session(self.session)
            if close is not None:
                level, reason, fields = close
                self.close(level, reason, **fields)
                return

    def close(self, level: int, reason: str, **fields: Any) -> None:
        """Log why, drop what is still running and have the network process close the socket
        once the answers already sent are written."""
        if self._closed:
            return
        log_event(logger, level, "connection_closed", peer=self.peer, reason=reason, **fields)
        self._channel.send(Kind.CLOSE, self._id)
        self.gone()

    def gone(self) -> None:
        """The socket is closed: nothing more is owed, so nothing more is computed."""
        if self._closed:
            return
        self._closed = True
        self._counted.clear()
        self._budget.forget(self)
        for task in self._in_flight:
            task.cancel()
        self._in_flight.clear()
        self._broker.share_partitions.connection_closed(self.session)  # its share sessions end
        self._end()


class NetworkProcess:
    """One network process and its channel: the connections it holds, by its ids."""

    def __init__(self, broker: HandlerServices, security: Security, admission: Admission,
                 listen: list[tuple[Listener, int, int]]) -> None:
        self._broker = broker
        self._security = security
        self._admission = admission
        self._listen = listen  # each listening socket's listener, descriptor and bound port
        self._listeners = {listener.name: (listener, port) for listener, _, port in listen}
        self._connections: dict[int, RelayedConnection] = {}
        self._admitting: dict[int, asyncio.Task[None]] = {}
        self._channel: Channel | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Future[None] | None = None
        self._frames = FairFrames(asyncio.get_running_loop())
        self.lost = asyncio.Event()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        listening = [descriptor for _, descriptor, _ in self._listen]
        command = [sys.executable, "-m", "kgroups.broker.net.network_front",
                   str(theirs.fileno()), *map(str, listening)]
        config = self._broker.config
        settings = {"host": config.host, "port": config.port, "data_dir": str(config.data_dir),
                    "properties": dict(config.properties),
                    "log_level": logging.getLevelName(logging.getLogger().getEffectiveLevel()),
                    "listeners": [listener.name for listener, _, _ in self._listen]}
        try:
            self._process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.PIPE,
                pass_fds=[theirs.fileno(), *listening])
        except BaseException:
            ours.close()  # the start is tried again: leak no descriptor on the way
            raise
        finally:
            theirs.close()
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(settings).encode())
        self._process.stdin.close()
        self._ready = loop.create_future()
        _, channel = await loop.create_unix_connection(
            lambda: Channel(self._received, self._channel_lost, per_pass=None,
                            handed=self._frames.read_done), sock=ours)
        self._channel = channel
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_S)
        except TimeoutError:
            await self.stop()
            raise OSError("the network process did not start") from None

    def _received(self, kind: int, connection_id: int, payload: bytes) -> None:
        """One message from the network process. What fails here fails its connection only
        (an exception out of here would end the channel, and every client with it)."""
        try:
            self._receive(kind, connection_id, payload)
        except Exception as error:
            log_event(logger, logging.ERROR, "relay_message_failed", kind=kind,
                      error=describe(error))
            connection = self._connections.get(connection_id)
            if connection is not None:
                connection.close(logging.ERROR, "handler_failed", error=repr(error))
            elif kind == Kind.OPEN:
                self._send(connection_id, Kind.CLOSE)

    def _receive(self, kind: int, connection_id: int, payload: bytes) -> None:
        connection = self._connections.get(connection_id)
        if kind == Kind.FRAME:
            if connection is not None:
                self._frames.add(connection, payload)
        elif kind == Kind.TAKEN:
            if connection is not None:
                connection.taken(int.from_bytes(payload, "big"))
        elif kind == Kind.OPEN:
            self._admitting[connection_id] = asyncio.get_running_loop().create_task(
                self._open(connection_id, payload.decode()))
        elif kind == Kind.GONE:
            admitting = self._admitting.pop(connection_id, None)
            if admitting is not None:
                admitting.cancel()
            if connection is not None:
                log_event(logger, logging.DEBUG, "connection_lost", peer=connection.peer)
                connection.gone()
        elif kind == Kind.IDENTITY:
            if connection is not None:
                connection.session.principal = payload.decode()
        elif kind == Kind.READY and self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    async def _open(self, connection_id: int, announced: str) -> None:
        listener_name, host, port = announced.split("\0")
        listener, bound_port = self._listeners[listener_name]
        peer = f"{host}:{port}"
        try:
            await self._admission.admit(listener)
        finally:
            self._admitting.pop(connection_id, None)
        channel = self._channel
        if channel is None or not self._admission.hold(host, peer):
            self._send(connection_id, Kind.CLOSE)
            return

        def end() -> None:
            self._frames.drop(self._connections.pop(connection_id))
            self._admission.release(host)

        self._connections[connection_id] = RelayedConnection(
            self._broker, new_session(self._security, listener, bound_port), host, peer,
            channel, connection_id, end)
        self._send(connection_id, Kind.ADMIT)

    def _send(self, connection_id: int, kind: Kind, payload: bytes = b"") -> None:
        if self._channel is not None:
            self._channel.send(kind, connection_id, payload)

    def _channel_lost(self) -> None:
        """The process ended (or its channel did): every connection it held is gone."""
        for task in list(self._admitting.values()):
            task.cancel()
        self._admitting.clear()
        for connection in list(self._connections.values()):
            connection.gone()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(OSError("the network process exited at start"))
        self.lost.set()

    async def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
        process = self._process
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        self._channel_lost()

    @property
    def exit_code(self) -> int | None:
        return None if self._process is None else self._process.returncode


class NetworkFront:
    """`num.network.threads` network processes sharing the listening sockets; one that dies
    is started again, with a backoff (see the module)."""

    def __init__(self, broker: HandlerServices, security: Security, admission: Admission,
                 count: int) -> None:
        self._broker = broker
        self._security = security
        self._admission = admission
        self._count = count
        self._processes: list[NetworkProcess] = []
        self._watchers: set[asyncio.Task[None]] = set()
        self._stopping = False

    async def start(self, listen: list[tuple[Listener, int, int]]) -> None:
        for _ in range(self._count):
            await self._spawn(listen)

    async def _spawn(self, listen: list[tuple[Listener, int, int]]) -> None:
        process = NetworkProcess(self._broker, self._security, self._admission, listen)
        await process.start()
        self._processes.append(process)
        watcher = asyncio.get_running_loop().create_task(self._watch(process, listen))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, process: NetworkProcess,
                     listen: list[tuple[Listener, int, int]]) -> None:
        await process.lost.wait()
        if self._stopping:
            return
        await process.stop()
        self._processes.remove(process)
        counts = self._broker.task_counts
        counts.crashes[TASK_NAME] += 1
        backoff = Backoff()
        delay = backoff.next_delay(0.0)
        log_event(logger, logging.ERROR, "network_process_exited", code=process.exit_code,
                  restart_in_s=delay)
        while not self._stopping:
            await asyncio.sleep(delay)
            try:
                await self._spawn(listen)
            except OSError as exc:
                counts.crashes[TASK_NAME] += 1
                delay = backoff.next_delay(0.0)
                log_event(logger, logging.ERROR, "network_process_start_failed", error=exc,
                          restart_in_s=delay)
                continue
            counts.restarts[TASK_NAME] += 1
            log_event(logger, logging.WARNING, "network_process_restarted")
            return

    async def stop(self) -> None:
        self._stopping = True
        for watcher in list(self._watchers):
            watcher.cancel()
        await asyncio.gather(*(process.stop() for process in self._processes))
        self._processes.clear()
