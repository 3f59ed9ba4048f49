"""The store's connection to PostgreSQL, which comes back by itself after it was lost.

Every database call of the store runs inside `Database.use()`. A connection-level failure
there (the server went away, an administrator ended the session, the server ended a
transaction left idle too long, the socket broke: psycopg's OperationalError and
InterfaceError, and IdleInTransactionSessionTimeout) closes the connection and surfaces as
StorageUnavailableError, the URL shown without its password; any other error (a constraint,
a schema error, the store's own FencedError) passes through as it is. The next call opens a
new connection, once: never a loop of attempts inside a call, because the broker calls the
store on its event loop. A connection attempt that fails makes the calls of the next moments
fail at once with the same error (FIRST_RETRY_BACKOFF_S, doubling with each failed attempt up
to MAX_RETRY_BACKOFF_S, forgotten at the first success), so a flood of requests against a
dead server pays for one attempt, not one each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.abc import Params

from kgroups.storage.columns import Connection

# The first connection (at start, before anything is served) may take its time.
CONNECT_TIMEOUT_S = 5
# A reconnection runs on the caller's thread, the broker's event loop among them: libpq's
# smallest timeout (it reads 1 as 2).
RECONNECT_TIMEOUT_S = 2
FIRST_RETRY_BACKOFF_S = 0.25
MAX_RETRY_BACKOFF_S = 2.0
# The server ending a session idle in a transaction (see Database) reports an InternalError,
# but the session is gone all the same.
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError,
                     psycopg.errors.IdleInTransactionSessionTimeout)


class StorageUnavailableError(OSError):
    """The store cannot be reached, refused the connection or lost it during a call (which
    then may or may not have taken effect, see PostgresStore.append)."""


def redacted(url: str) -> str:
    """The URL without its password (after the user name, or a `password=` option), for
    messages and logs; taken apart as text, so that a malformed URL is shown too."""
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    netloc = f"{user.split(':', 1)[0]}:***@{host}" if at and ":" in user else parts.netloc
    query = "&".join(
        f"{pair.split('=', 1)[0]}=***" if pair.split("=", 1)[0].lower() == "password" else pair
        for pair in parts.query.split("&")) if parts.query else ""
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _nothing(connection: Connection) -> None:
    """No setup on a new connection."""


class Database:
    def __init__(self, url: str, on_connect: Callable[[Connection], None] = _nothing,
                 idle_transaction_timeout_ms: int = 0) -> None:
        """`on_connect` prepares every new connection (the listener's LISTENs) before use.
        `idle_transaction_timeout_ms` (0: none), PostgreSQL's
        idle_in_transaction_session_timeout: the server ends the session of a client that
        stopped in the middle of a transaction (a frozen process, a paused VM) after that
        long, and with it the row locks it held, which would otherwise stop every other
        client wanting those rows for as long as the frozen one lives."""
        self.url = url
        self._on_connect = on_connect
        self._idle_transaction_timeout_ms = idle_transaction_timeout_ms
        self._connection: Connection | None = None
        # How many connections were opened: a listener that sees it grow knows it was away.
        self.connections_opened = 0
        self._backoff_s = 0.0
        self._retry_at = 0.0
        self._last_failure = ""
        self._closed = False

    @contextmanager
    def use(self) -> Iterator[Connection]:
        """The live connection (opened now if there is none) for one call; connection-level
        failures inside end it and raise StorageUnavailableError."""
        connection = self._live()
        try:
            yield connection
        except CONNECTION_ERRORS as exc:
            connection.close()
            self._connection = None
            raise StorageUnavailableError(
                f"lost the connection to PostgreSQL at {redacted(self.url)}: "
                f"{_first_line(exc)}") from exc

    def execute(self, statement: str, params: Params | None = None
                ) -> psycopg.Cursor[tuple[object, ...]]:
        """One statement on its own (autocommit); its rows are read before it returns."""
        with self.use() as connection:
            return connection.execute(statement, params)

    def _live(self) -> Connection:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        if self._closed:
            raise StorageUnavailableError(
                f"the connection to PostgreSQL at {redacted(self.url)} was closed")
        now = time.monotonic()
        if now < self._retry_at:
            raise StorageUnavailableError(self._last_failure)
        first_attempt = self.connections_opened == 0 and not self._last_failure
        timeout = CONNECT_TIMEOUT_S if first_attempt else RECONNECT_TIMEOUT_S
        connection: Connection | None = None
        try:
            # A server whose host vanished without closing the socket (power loss, a network
            # partition) would leave a call waiting for TCP's own retransmission timeout (many
            # minutes): keepalive probes and TCP_USER_TIMEOUT end it after about 8 s instead.
            connection = psycopg.connect(
                self.url, autocommit=True, connect_timeout=timeout, keepalives=1,
                keepalives_idle=5, keepalives_interval=1, keepalives_count=3,
                tcp_user_timeout=8000)
            if self._idle_transaction_timeout_ms:
                connection.execute(
                    "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                    (str(self._idle_transaction_timeout_ms),))
            self._on_connect(connection)
        except (psycopg.Error, ValueError) as exc:
            if connection is not None:
                connection.close()
            self._backoff_s = min(MAX_RETRY_BACKOFF_S,
                                  self._backoff_s * 2 or FIRST_RETRY_BACKOFF_S)
            self._retry_at = time.monotonic() + self._backoff_s
            self._last_failure = (f"PostgreSQL at {redacted(self.url)} is unreachable: "
                                  f"{_first_line(exc)}")
            raise StorageUnavailableError(self._last_failure) from exc
        self._backoff_s = 0.0
        self.connections_opened += 1
        self._connection = connection
        return connection

    def close(self) -> None:
        """For good: no call connects again."""
        self._closed = True
        if self._connection is not None:
            self._connection.close()
            self._connection = None
