"""PostgreSQL's JDBC driver, which Spark's JDBC data source needs to read a kgroups store
(store_source.py): one pinned jar, fetched from Maven by the Makefile's `postgresql-jdbc` rule
into the kgroups cache (never into git), and handed to every session `session.build_session`
starts, as spark.jars (the driver JVM and every executor get it)."""

from __future__ import annotations

from pathlib import Path

from kgroups.pipeline.class_archive import cache_dir

# The Makefile's POSTGRESQL_JDBC_VERSION (tests/test_makefile.py holds them equal).
POSTGRESQL_JDBC_VERSION = "42.7.14"
DRIVER_CLASS = "org.postgresql.Driver"


def jdbc_jar() -> Path:
    """Where `make postgresql-jdbc` puts the driver: the kgroups cache directory."""
    return cache_dir() / "postgresql-jdbc" / f"postgresql-{POSTGRESQL_JDBC_VERSION}.jar"
