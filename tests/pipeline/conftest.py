"""One SparkSession for the whole test session: starting a JVM costs seconds, so every Spark
test shares it (local[2], few shuffle partitions, no UI)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from kgroups.pipeline.session import build_session, stop_session

    session = build_session("local[2]", shuffle_partitions=4)
    yield session
    stop_session(session)
