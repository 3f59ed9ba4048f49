"""One PostgreSQL server for the storage tests; each test gets a database of its own."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from tests.storage.postgres_server import PostgresServer

from kgroups.storage.postgresql import PostgresStore


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer.start()
    yield server
    server.stop()


def new_database(server: PostgresServer) -> str:
    """The URL of a new, empty database on `server`."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return server.url.rsplit("/", 1)[0] + f"/{name}"


@contextlib.contextmanager
def every_store_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every PostgresStore opened inside is closed on leaving: a test's broker connections
    die with the test, not at a later garbage collection, whose warning about an open
    connection would fail whichever test happens to run then."""
    opened: list[PostgresStore] = []
    open_store = PostgresStore.open

    def tracked(*args: Any, **kwargs: Any) -> PostgresStore:
        store = open_store(*args, **kwargs)
        opened.append(store)
        return store

    monkeypatch.setattr(PostgresStore, "open", tracked)
    try:
        yield
    finally:
        for store in opened:
            store.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The URL of a new, empty database; the stores the test opens are closed after it."""
    with every_store_closed(monkeypatch):
        yield new_database(postgres_server)
