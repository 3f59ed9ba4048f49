"""`kgroups analyze postgresql://...`: the history read from a PostgreSQL store (kgroups.storage)
instead of segment files, through Spark's JDBC data source and PostgreSQL's JDBC driver.

The driver lists the store first with psycopg (topics, partitions, where each log ends), so a
wrong URL is reported before a JVM starts. Spark then reads `__consumer_offsets` from the
`batches` table with one JDBC predicate per offsets partition: one Spark partition, so one task,
per offsets partition, which puts its batches in offset order and decodes them with the segment
files' decoder (`decode.decode_offsets_log`). The other topics' batches are read as header
numbers only, computed in the database, for lag; a lagging record's timestamp is read back
from the store.

The URL's user and password travel to the JVM as JDBC connection properties, never inside the
JDBC URL, and every message shows the URL `redacted`.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from kgroups.pipeline import lag_seconds, tasks
from kgroups.pipeline.decode import TOPIC_ROW_SCHEMA
from kgroups.pipeline.discovery import OFFSETS_TOPIC, InputNotFoundError, SegmentFile
from kgroups.pipeline.jdbc_driver import DRIVER_CLASS
from kgroups.pipeline.topic_logs import TopicLogs, TopicPartition
from kgroups.pipeline.window import TimeWindow
from kgroups.storage.postgresql import PostgresStore, redacted

# Rows the JDBC driver fetches at a time: batches are up to a megabyte or so each; without a
# fetch size PostgreSQL's driver holds a partition's whole result in the JVM.
FETCH_ROWS = 64
_OFFSETS_BATCHES = (f"(SELECT partition, base_offset, data FROM batches "
                    f"WHERE topic = '{OFFSETS_TOPIC}') AS offsets_batches")
# A batch's maxTimestamp: the 8 bytes after baseOffset, length, partitionLeaderEpoch, magic,
# crc, attributes, lastOffsetDelta and baseTimestamp (bytes 35-42, 1-based 36).
_MAX_TIMESTAMP = "('x' || encode(substring(data from 36 for 8), 'hex'))::bit(64)::bigint"
_TOPIC_BATCHES = (f"(SELECT topic, partition, base_offset, last_offset, "
                  f"{_MAX_TIMESTAMP} AS max_timestamp FROM batches "
                  f"WHERE topic <> '{OFFSETS_TOPIC}') AS topic_batches")


@dataclass(frozen=True, slots=True)
class StoreInputs:
    """What a run reads from a store, as listed before Spark starts."""

    url: str = field(repr=False)  # may hold a password
    offsets_partitions: int
    topic_names: dict[uuid.UUID, str]
    log_ends: dict[TopicPartition, int]  # every other topic partition's next offset


def list_store(url: str) -> StoreInputs:
    """The store's topics; StorageUnavailableError when it cannot be reached, and
    InputNotFoundError when it holds no __consumer_offsets, both naming it without password."""
    jdbc_connection(url)  # a URL Spark could not use is refused before anything runs
    store = PostgresStore.open(url)
    try:
        topics = store.topics()
        if OFFSETS_TOPIC not in topics:
            raise InputNotFoundError(f"no {OFFSETS_TOPIC} topic in the store at {redacted(url)}")
        log_ends = {(topic, partition): store.partition_state(topic, partition).next_offset
                    for topic, (_, count) in topics.items() if topic != OFFSETS_TOPIC
                    for partition in range(count)}
    finally:
        store.close()
    return StoreInputs(url, topics[OFFSETS_TOPIC][1],
                       {topic_id: name for name, (topic_id, _) in topics.items()}, log_ends)


def jdbc_connection(url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL (host, port, database and query options such as sslmode, which PostgreSQL's
    JDBC driver reads under libpq's names) and the connection properties (driver, fetch size,
    user, password, from the URL's user info or options) for a postgresql:// URL."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise InputNotFoundError(f"{redacted(url)}: Spark's JDBC reader needs a host name")
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError as exc:
        raise InputNotFoundError(f"{redacted(url)}: {exc}") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    properties = {"driver": DRIVER_CLASS, "fetchsize": str(FETCH_ROWS)}
    options = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in ("user", "password"):
            properties[name] = value
        else:
            options.append((name, value))
    if parts.username:
        properties["user"] = unquote(parts.username)
    if parts.password is not None:
        properties["password"] = unquote(parts.password)
    query = f"?{urlencode(options)}" if options else ""
    return f"jdbc:postgresql://{host}{port}{parts.path}{query}", properties


class StoreSource:
    """A run's reads from a store (job.LogSource)."""

    units = "partitions in PostgreSQL"

    def __init__(self, inputs: StoreInputs) -> None:
        self.inputs = inputs
        self.jdbc_url, self._properties = jdbc_connection(inputs.url)
        self.described = [redacted(inputs.url)]
        self.count = inputs.offsets_partitions + len(inputs.log_ends)

    def read_transactions(self) -> pa.Table | None:
        """A store's __transaction_state is not read (kgroups serves no transactions in
        cluster mode yet)."""
        return None

    def read_share_partitions(self) -> pa.Table | None:
        """A store's __share_group_state is not read (the share coordinator keeps it in the
        local log only)."""
        return None

    def read_topic_batches(self, spark: SparkSession) -> pa.Table | None:
        """decode.TOPIC_ROW_SCHEMA rows of every other topic's batches; `file` is the topic
        partition and `position` the batch's base offset (what `read_at` looks up)."""
        if not self.inputs.log_ends:
            return None
        frame = spark.read.jdbc(self.jdbc_url, _TOPIC_BATCHES, properties=self._properties)
        found = frame.toArrow()
        count = found.num_rows
        names = pc.binary_join_element_wise(
            found["topic"], pc.cast(found["partition"], pa.string()), "-")
        columns = {"file": names, "topic": found["topic"], "partition": found["partition"],
                   "base_offset": found["base_offset"], "last_offset": found["last_offset"],
                   "max_timestamp": found["max_timestamp"], "position": found["base_offset"],
                   "error_position": pa.nulls(count, pa.int64()),
                   "error": pa.nulls(count, pa.string())}
        return pa.Table.from_arrays([columns[f.name] for f in TOPIC_ROW_SCHEMA],
                                    schema=TOPIC_ROW_SCHEMA)

    def topic_logs(self, batches: pa.Table) -> TopicLogs:
        return TopicLogs.from_rows(batches, self.inputs.log_ends)

    def analyse_partitions(self, spark: SparkSession, window: TimeWindow,
                           topic_logs: Broadcast[TopicLogs | None], out: str) -> pa.Table:
        """tasks.RESULT_SCHEMA rows of every offsets partition, one Spark task each."""
        task = tasks.store_partition_task(list(range(self.inputs.offsets_partitions)),
                                          self.inputs.topic_names, window, topic_logs, out)
        return self.offsets_batches(spark).select("base_offset", "data").mapInArrow(
            task, from_arrow_schema(tasks.RESULT_SCHEMA)).toArrow()

    def offsets_batches(self, spark: SparkSession) -> DataFrame:
        """The store's __consumer_offsets batches (partition, base_offset, data), Spark
        partition i holding offsets partition i: one JDBC predicate each."""
        predicates = [f"partition = {p}" for p in range(self.inputs.offsets_partitions)]
        return spark.read.jdbc(self.jdbc_url, _OFFSETS_BATCHES, predicates=predicates,
                               properties=self._properties)

    def add_lag_seconds(self, lag: pa.Table, windows: pa.Table, batches: pa.Table,
                        now_ms: int) -> pa.Table:
        # Each topic partition is one "segment" whose batch positions are base offsets.
        segments = [SegmentFile(f"{topic}-{partition}", topic, partition, 0, 0)
                    for topic, partition in self.inputs.log_ends]
        reader = _RecordReader(self.inputs.url)
        try:
            return lag_seconds.add_lag_seconds(lag, windows, batches, segments, now_ms,
                                               reader.timestamp)
        finally:
            reader.close()


class _RecordReader:
    """Reads lagging records' timestamps back from the store over one connection, which the
    lag table's reading threads take turns on."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._store: PostgresStore | None = None

    def timestamp(self, name: str, base_offset: int, offset: int) -> int | None:
        topic, _, partition = name.rpartition("-")
        with self._lock:
            if self._store is None:
                self._store = PostgresStore.open(self._url)
            data = self._store.read(topic, int(partition), base_offset, 1)
        return lag_seconds.timestamp_in_batch(data, offset)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
