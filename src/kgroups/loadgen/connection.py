"""One asyncio connection to a broker, with many requests in flight (answers matched by
correlation id), framed with the broker's own codec (`kgroups.broker.wire`).

A member of the load generator owns one: a real consumer keeps its own connection to the group
coordinator, and Kafka reads a connection's next request only once the previous one is answered,
so members sharing a connection would wait behind each other's parked JoinGroup. A closed or
broken connection fails every request still waiting with `ConnectionLost`, which names the
broker and what happened, and refuses anything sent after: nothing waits for an answer that
cannot come.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from typing import Any

from kgroups.broker.wire import decode_response, encode_request, response_type

_SIZE = struct.Struct(">i")
# An answer bigger than this is a broken peer, not a group answer (a 10,000-member JoinGroup
# answer to the leader is a few MB).
MAX_FRAME_BYTES = 256 * 1024 * 1024


class ConnectionLost(ConnectionError):
    """The broker closed the connection, it broke, or it sent something unreadable."""


class BrokerConnection:
    """`on_lost` is told when the broker closes or breaks the connection (not when the client
    closes it), with nothing in flight too: a member between heartbeats learns at once."""

    def __init__(self, host: str, port: int, client_id: str,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_lost: Callable[[ConnectionLost], None] | None = None) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.on_lost = on_lost
        self._reader = reader
        self._writer = writer
        self._waiting: dict[int, tuple[asyncio.Future[Any], type[Any]]] = {}
        self._correlation_id = 0
        self._lost: ConnectionLost | None = None
        self._reading = asyncio.ensure_future(self._read_answers())

    @classmethod
    async def open(cls, host: str, port: int, client_id: str,
                   on_lost: Callable[[ConnectionLost], None] | None = None) -> BrokerConnection:
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to {host}:{port}: {exc}") from exc
        return cls(host, port, client_id, reader, writer, on_lost)

    @property
    def lost(self) -> ConnectionLost | None:
        return self._lost

    def send(self, request: Any) -> asyncio.Future[Any]:
        """Write a kio request; the future gets its kio answer or `ConnectionLost`."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._lost is not None:
            future.set_exception(self._lost)
            return future
        self._correlation_id += 1
        schema = response_type(int(request.__api_key__), int(request.__version__))
        self._waiting[self._correlation_id] = (future, schema)
        self._writer.write(encode_request(self._correlation_id, self.client_id, request))
        return future

    async def call(self, request: Any) -> Any:
        return await self.send(request)

    async def _read_answers(self) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                if not 0 <= size <= MAX_FRAME_BYTES:
                    raise ConnectionLost(f"{self.address} sent a frame of {size} bytes")
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame)
                entry = self._waiting.pop(correlation_id, None)
                if entry is None:
                    raise ConnectionLost(f"{self.address} answered correlation id "
                                         f"{correlation_id}, which nothing is waiting for")
                future, schema = entry
                if not future.done():
                    future.set_result(decode_response(schema, frame)[1])
        except asyncio.CancelledError:
            self._fail(ConnectionLost(f"connection to {self.address} was closed by the client"),
                       by_client=True)
            raise
        except asyncio.IncompleteReadError:
            self._fail(ConnectionLost(f"{self.address} closed the connection"))
        except ConnectionLost as exc:
            self._fail(exc)
        except Exception as exc:  # a reset socket or an answer that does not decode
            self._fail(ConnectionLost(f"connection to {self.address} failed: {exc!r}"))

    def _fail(self, error: ConnectionLost, by_client: bool = False) -> None:
        waiting = len(self._waiting)
        if waiting:
            error = ConnectionLost(f"{error} ({waiting} requests unanswered)")
        self._lost = error
        for future, _ in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()
        self._writer.close()
        if self.on_lost is not None and not by_client:
            self.on_lost(error)

    async def close(self) -> None:
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
