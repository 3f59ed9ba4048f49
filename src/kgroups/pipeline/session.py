"""One place that builds the SparkSession, so the CLI, the tests and the bench run Spark alike."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def build_session(
    master: str | None = None, shuffle_partitions: int | None = None
) -> SparkSession:
    """Start (or reuse) a SparkSession for the pipeline.

    With no master the launcher's choice stands: spark-submit's --master on a cluster, local[*]
    when run as a plain Python program.

    PYSPARK_PYTHON is pinned to this interpreter because the workers must import kgroups and its
    pinned pyarrow/pandas; a bare `python3` on PATH would not have them.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName("kgroups-analyze")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        # The JVM only schedules tasks and carries small Arrow results (the decoding runs in
        # the Python workers), so the quick C1 compiler is enough for it, and a run's first
        # job is a second and a half faster than with C2 warming up.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    )
    if master is not None:
        builder = builder.master(master)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
