"""`kgroups analyze PATH... --out DIR`: the Spark pipeline from the command line."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kgroups.pipeline.store_source import StoreInputs

# What `pip install 'kgroups[spark]'` adds; the broker and the other commands run without them.
SPARK_EXTRA_MODULES = ("pyspark", "pandas", "pyarrow", "matplotlib")
# What the very first run on a machine pays, and why (docs/pipeline.md, "Driver JVM class
# archive"): said before the wait, not after it.
FIRST_RUN_NOTE = (
    "kgroups analyze: first run on this machine: Spark's JVM loads its ~280 jars' classes "
    "unaided and records them into a class archive (about 150 MB, in the kgroups cache "
    "directory), written when the run ends: about 20-30 s more, once; later runs start in "
    "about half the time")


def _epoch_ms(text: str) -> int:
    """An ISO 8601 time as epoch milliseconds; a time without a zone is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (e.g. 2024-05-01T12:00:00Z)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="analyse __consumer_offsets segment files with Spark into tables and a report",
        description=(
            "Read __consumer_offsets segments (a kgroups data dir or Kafka log dirs, local or "
            "any filesystem pyarrow opens), or a kgroups PostgreSQL store, with PySpark and "
            "write Parquet tables and report.html under --out."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="data dir, log dir, partition dir or segment file; or, alone, a "
                        "kgroups store's URL, postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE "
                        "(read through Spark's JDBC source: `make postgresql-jdbc` fetches "
                        "the driver)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--master", metavar="URL",
                        help="Spark master: local[N], spark://..., yarn (default: spark-submit's "
                        "--master, else local[*]; a SparkSession already running in the process "
                        "is used as it is)")
    parser.add_argument("--since", type=_epoch_ms, metavar="ISO",
                        help="history tables start at this time")
    parser.add_argument("--until", type=_epoch_ms, metavar="ISO",
                        help="ignore records after this time (state is as of then)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument("--s3-endpoint", metavar="URL",
                        help="an S3-compatible store for s3:// paths (MinIO, Ceph, ...), e.g. "
                        "http://127.0.0.1:9000; sets AWS_ENDPOINT_URL for the driver and the "
                        "executors (credentials: the usual AWS_* variables on every node)")
    parser.set_defaults(run=run)


def process_seconds() -> float | None:
    """Seconds since this process started, as the kernel counts them (the interpreter's start
    and every import included); None where /proc does not say (not Linux)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # Field 22, start time in clock ticks after boot; the name (field 2) may hold spaces.
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def missing_spark_extra() -> list[str]:
    """The modules of the `spark` extra that this Python cannot import."""
    return [name for name in SPARK_EXTRA_MODULES if importlib.util.find_spec(name) is None]


def _store_inputs(paths: list[str]) -> StoreInputs:
    """A store's listing (store_source.StoreInputs) for a lone PostgreSQL URL; InputNotFoundError
    when the URL comes with other inputs or Spark would lack PostgreSQL's JDBC driver."""
    from kgroups.pipeline.discovery import InputNotFoundError
    from kgroups.pipeline.jdbc_driver import jdbc_jar
    from kgroups.pipeline.store_source import list_store
    from kgroups.storage.postgresql import redacted

    if len(paths) != 1:
        raise InputNotFoundError("a PostgreSQL URL is analysed alone, not with other PATHs: "
                                 + ", ".join(redacted(path) for path in paths))
    if not jdbc_jar().is_file():
        raise InputNotFoundError(f"PostgreSQL's JDBC driver is not at {jdbc_jar()}: fetch it "
                                 "with `make postgresql-jdbc`")
    return list_store(paths[0])


def run(args: argparse.Namespace) -> int:
    called = time.monotonic()
    missing = missing_spark_extra()
    if missing:
        print(f"kgroups analyze needs the spark extra (missing: {', '.join(missing)}); "
              "install it with: pip install 'kgroups[spark]'", file=sys.stderr)
        return 2
    # Spark is imported here so that `kgroups --help` and the other commands stay fast, and
    # run without the spark extra.
    from pyspark.sql import SparkSession

    from kgroups.pipeline.discovery import InputNotFoundError, LogInputs, find_inputs
    from kgroups.pipeline.job import run_analysis
    from kgroups.pipeline.progress import StepProgress
    from kgroups.pipeline.session import build_session, stop_session, writes_class_archive
    from kgroups.pipeline.window import TimeWindow
    from kgroups.storage.postgresql import is_store_url
    from kgroups.storage.schema import SchemaVersionError

    if args.since is not None and args.until is not None and args.since > args.until:
        print("kgroups analyze: --since is after --until", file=sys.stderr)
        return 2
    executor_env: dict[str, str] = {}
    if args.s3_endpoint:
        # pyarrow's S3 filesystem reads it on the driver (listing) and in every Python worker
        # (each opens its segments itself), so no Hadoop S3 connector is involved.
        os.environ["AWS_ENDPOINT_URL"] = executor_env["AWS_ENDPOINT_URL"] = args.s3_endpoint
    # Listing first means a wrong PATH (or store URL) is reported in a second, before a JVM
    # starts.
    inputs: LogInputs | StoreInputs
    try:
        if any(is_store_url(path) for path in args.paths):
            inputs = _store_inputs(args.paths)
        else:
            inputs = find_inputs(args.paths)
    except (InputNotFoundError, OSError, SchemaVersionError) as exc:
        print(f"kgroups analyze: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    # Executors write offset_commits themselves, from their own working directory.
    out = args.out if "://" in args.out else os.path.abspath(args.out)
    # Inside a process that already runs Spark (a notebook, a test session) that session is
    # used and left running; starting a second JVM would cost more than the analysis.
    running = SparkSession.getActiveSession()
    launched = time.monotonic()

    def announce(first_run: bool) -> None:
        if args.quiet:
            return
        print("kgroups analyze: starting Spark (its driver JVM: a few seconds, more on a busy "
              "machine)", file=sys.stderr, flush=True)
        if first_run:
            print(FIRST_RUN_NOTE, file=sys.stderr, flush=True)

    spark = running or build_session(args.master, executor_env=executor_env,
                                     announce=announce)
    if running is None and not args.quiet:
        print(f"kgroups analyze: Spark started in {time.monotonic() - launched:.1f} s",
              file=sys.stderr, flush=True)
    try:
        with StepProgress(spark, enabled=not args.quiet) as progress:
            result = run_analysis(spark, args.paths, out,
                                  TimeWindow(args.since, args.until), progress, inputs)
        # The time a user waited: from the process's start (Python, imports, the JVM's
        # launch) to the report written. Inside a running session, from this call.
        waited = process_seconds() if running is None else None
        if waited is None:
            waited = time.monotonic() - called
        print(
            f"{result.records:,} records from {result.segments} {result.units} in {waited:.1f} s "
            f"(Spark job {result.seconds:.1f} s); tables: {', '.join(result.tables)}; "
            f"report: {result.out.rstrip('/')}/report.html",
            flush=True,
        )
        if result.errors:
            print(f"{result.errors} damaged region(s) skipped, listed in the report",
                  file=sys.stderr)
    finally:
        # Reported first: a first run's stop waits some seconds for the JVM to write its
        # class archive.
        if running is None:
            if writes_class_archive() and not args.quiet:
                print("kgroups analyze: saving Spark's classes to the cache for faster later runs "
                      "(once, about 10-15 s; more on a busy machine)", file=sys.stderr, flush=True)
            stop_session(spark)
    return 0
