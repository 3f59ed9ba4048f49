"""One PostgreSQL server for the storage tests; each test gets a database of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from tests.storage.postgres_server import PostgresServer


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


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new, empty database."""
    return new_database(postgres_server)
