"""One place that builds the SparkSession, so the CLI, the tests and the bench run Spark alike,
and one that stops it, so the driver JVM's class archive (`class_archive`) gets installed."""

from __future__ import annotations

import atexit
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from kgroups.pipeline.class_archive import ClassArchive, finish_archive, plan_archive
from kgroups.pipeline.jdbc_driver import jdbc_jar

# How long the first run waits for its JVM to dump the class archive (150 MB) and exit: about
# 12 s on a busy 2-core machine.
ARCHIVE_DUMP_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class _ArchiveWrite:
    """A JVM this process launched, which dumps `archive` when it exits."""

    gateway: Any  # py4j's JavaGateway, with PySpark's `proc` (the JVM's Popen) attached
    archive: ClassArchive


_archive_write: _ArchiveWrite | None = None


def build_session(
    master: str | None = None, shuffle_partitions: int | None = None,
    executor_env: Mapping[str, str] | None = None,
    announce: Callable[[bool], None] | None = None,
) -> SparkSession:
    """Start (or reuse) a SparkSession for the pipeline.

    With no master the launcher's choice stands: spark-submit's --master on a cluster, local[*]
    when run as a plain Python program.

    PYSPARK_PYTHON is pinned to this interpreter because the workers must import kgroups and its
    pinned pyarrow/pandas; a bare `python3` on PATH would not have them.

    When this call launches the driver JVM, that JVM maps the class archive, or dumps it at exit
    when there is none yet (see `class_archive`); stop the session with `stop_session` so that the
    archive gets installed (or it is, at the latest, when the interpreter exits).

    `executor_env` goes into the environment of every executor's Python workers
    (spark.executorEnv.*): on a cluster they do not inherit the driver's.

    `announce` is called just before this call launches the driver JVM (not when one runs
    already), with whether that JVM is the first on this machine, the one that writes the
    class archive: a command tells its user what the wait is for.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    archive = plan_archive() if _launches_jvm() else None
    if archive is not None and archive.spark_home is not None:
        # PySpark launches the driver through $SPARK_HOME/bin/spark-submit, and the driver's
        # classpath is $SPARK_HOME/jars/*: the shared home's, the classpath of the archive.
        os.environ["SPARK_HOME"] = str(archive.spark_home)
    # The JVM only schedules tasks and carries small Arrow results (the decoding runs in the
    # Python workers), so the quick C1 compiler is enough for it, and a run's first job is a
    # second and a half faster than with C2 warming up.
    java_options = ["-XX:TieredStopAtLevel=1", *(archive.java_options if archive else [])]
    builder = (
        SparkSession.builder.appName("kgroups-analyze")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        # Spark's launcher splits this the way a shell would.
        .config("spark.driver.extraJavaOptions", shlex.join(java_options))
        # Workers import pyspark compiled, not from Spark's bytecode-less zip (spark_daemon):
        # the first job of a run reaches its tasks about 0.8 s sooner.
        .config("spark.python.daemon.module", "kgroups.pipeline.spark_daemon")
    )
    if jdbc_jar().is_file():
        # For `kgroups analyze postgresql://...`; jars are given when the session starts.
        builder = builder.config("spark.jars", str(jdbc_jar()))
    if master is not None:
        builder = builder.master(master)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for name, value in (executor_env or {}).items():
        builder = builder.config(f"spark.executorEnv.{name}", value)
    if announce is not None and _launches_jvm():
        announce(archive is not None and archive.part is not None)
    session = builder.getOrCreate()
    if archive is not None and archive.part is not None:
        _expect_archive_write(archive)
    session.sparkContext.setLogLevel("ERROR")
    return session


def _launches_jvm() -> bool:
    """Whether starting a session now launches a driver JVM with our options: not when this
    process already has one (driver options apply at launch only, and PySpark keeps its gateway
    JVM across SparkSession.stop), nor under spark-submit, which launched it before Python."""
    return SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ


def _expect_archive_write(archive: ClassArchive) -> None:
    global _archive_write
    _archive_write = _ArchiveWrite(SparkContext._gateway, archive)


def writes_class_archive() -> bool:
    """Whether `stop_session` will wait for the driver JVM to write the class archive (the first
    run on a machine), so that a command can tell its user why it takes a few more seconds."""
    return _archive_write is not None


def stop_session(spark: SparkSession) -> None:
    """Stop a session from `build_session`, and install the class archive its JVM dumps.

    When the JVM was launched to write the archive, it is made to exit now (the archive is only
    dumped at exit) and waited for, and PySpark forgets it, so that a later `build_session` in
    this process launches a new JVM, which maps the archive. Otherwise only Spark is stopped,
    as `spark.stop()` does: the JVM lives until the process exits, ready for another session.
    """
    spark.stop()
    _finish_archive_write()


def _finish_archive_write() -> None:
    global _archive_write
    write, _archive_write = _archive_write, None
    if write is None:
        return
    if SparkContext._gateway is write.gateway:
        SparkContext._gateway = None
        SparkContext._jvm = None
    write.gateway.shutdown()
    finish_archive(write.archive, write.gateway.proc, ARCHIVE_DUMP_TIMEOUT_SECONDS)


# Callers that only call spark.stop(), or nothing, still get the archive installed.
atexit.register(_finish_archive_write)
