"""Fixtures every test directory can use: the real Apache Kafka broker and `kgroups serve`,
session-scoped, and `any_broker` over both (see tests/kafka_harness.py); one SparkSession for
the whole run (starting a JVM costs seconds, so every Spark test shares it: local[2], few
shuffle partitions, no UI), defined once here so that two directories never stop it twice.

Hypothesis runs without its per-example deadline: CI has two cores shared with the brokers and
JVMs a run starts, so an example's wall time says nothing about the code under test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from kafka_harness import any_broker, kafka_broker, kgroups_broker

settings.register_profile("kgroups", deadline=None)
settings.load_profile("kgroups")

__all__ = ["any_broker", "kafka_broker", "kgroups_broker"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from kgroups.pipeline.session import build_session, stop_session

    session = build_session("local[2]", shuffle_partitions=4)
    yield session
    stop_session(session)
