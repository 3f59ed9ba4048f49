"""What every store module shares about talking to PostgreSQL: the database clock as one SQL
expression (leases and heartbeats are timed by it, so the brokers' clocks need not agree) and
checked conversions of the column values psycopg hands back."""

from __future__ import annotations

import uuid

import psycopg

# Milliseconds since the epoch on the database server's clock, at the moment of the statement.
NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint"

Connection = psycopg.Connection[tuple[object, ...]]


def as_int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected an integer column, got {value!r}")
    return value


def as_uuid(value: object) -> uuid.UUID:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"expected a uuid column, got {value!r}")
    return value


def as_bytes(value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"expected a bytea column, got {type(value).__name__}")
    return bytes(value)


def as_str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a text column, got {value!r}")
    return value
