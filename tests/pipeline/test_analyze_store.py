"""`kgroups analyze` and `kgroups offsets dump` over a kgroups PostgreSQL store: a history
imported with `kgroups storage import` must give the same tables, row for row, and the same
dump as its segment files, Spark must read __consumer_offsets with one task per offsets
partition, and a store that cannot be reached is one line naming it without its password."""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyarrow.parquet as pq
import pytest
from tests.pipeline.logdata import OffsetsLogBuilder, coordinator_partition
from tests.pipeline.test_analyze import T, build_scenario
from tests.storage.conftest import postgres_server, postgres_url

from kgroups.cli import main
from kgroups.log.topic_ids import read_partition_metadata, write_partition_metadata
from kgroups.pipeline.store_source import StoreSource, jdbc_connection, list_store
from kgroups.records import consumer_group as records
from kgroups.storage.postgresql import redacted

__all__ = ["postgres_server", "postgres_url"]  # the storage tests' PostgreSQL fixtures

PASSWORD = "s3cret-pw"
TABLES = ("offset_commits", "committed_offsets", "group_generations", "rebalances",
          "rebalance_causes", "partition_owners", "lag", "partition_lag_minutes",
          "group_summary")


def _consumer_group(data_dir: Path) -> None:
    """A KIP-848 group beside the scenario's classic ones (its records name topics by id, which
    the store keeps in its topics table): one member taking events-0 and events-1, a second
    joining and taking events-1."""
    group = next(f"kip-{n}" for n in range(100)
                 if not (data_dir / f"__consumer_offsets-{coordinator_partition(f'kip-{n}')}")
                 .exists())
    if read_partition_metadata(data_dir / "events-0") is None:
        write_partition_metadata(data_dir / "events-0", uuid.uuid4())
    events = read_partition_metadata(data_dir / "events-0")
    assert events is not None

    def owned(*partitions: int) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
        return ((events, partitions),)

    def member(name: str) -> tuple[object, object]:
        return (records.ConsumerGroupMemberMetadataKey(group, name),
                records.ConsumerGroupMemberMetadataValue(
                    None, None, f"client-{name}", "/127.0.0.1", ("events",), None, 45_000,
                    "uniform"))

    def epochs(epoch: int, targets: dict[str, tuple[int, ...]]) -> list[tuple[object, object]]:
        """The group epoch, each member's target and the target's epoch."""
        return [(records.ConsumerGroupMetadataKey(group),
                 records.ConsumerGroupMetadataValue(epoch)),
                *((records.ConsumerGroupTargetAssignmentMemberKey(group, name),
                   records.ConsumerGroupTargetAssignmentMemberValue(owned(*held)))
                  for name, held in targets.items()),
                (records.ConsumerGroupTargetAssignmentMetadataKey(group),
                 records.ConsumerGroupTargetAssignmentMetadataValue(epoch))]

    def current(name: str, epoch: int, held: tuple[int, ...]) -> tuple[object, object]:
        return (records.ConsumerGroupCurrentMemberAssignmentKey(group, name),
                records.ConsumerGroupCurrentMemberAssignmentValue(
                    epoch, epoch - 1, 0, owned(*held), ()))

    log = OffsetsLogBuilder()
    log.records(group, [member("a"), *epochs(1, {"a": (0, 1)}), current("a", 1, (0, 1))], T)
    log.records(group, [member("b"), *epochs(2, {"a": (0,), "b": (1,)}),
                        current("a", 2, (0,)), current("b", 2, (1,))], T + 5_000)
    log.write(data_dir)


def _history(tmp_path: Path, url: str) -> Path:
    """The analyze scenario's data dir with a KIP-848 group added, imported into `url`."""
    data_dir = build_scenario(tmp_path / "data").data_dir
    _consumer_group(data_dir)
    assert main(["storage", "import", str(data_dir), "--to", url]) == 0
    return data_dir


def _with_password(url: str) -> str:
    """The same store, its URL carrying a password (the test server trusts every login, so the
    password is sent and ignored: what a message or a log could leak)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(
        netloc=f"{parts.username}:{PASSWORD}@{parts.hostname}:{parts.port}"))


def _rows(out: Path, name: str) -> tuple[object, list[str]]:
    table = pq.read_table(out / name)
    return table.schema, sorted(map(repr, table.to_pylist()))


@pytest.mark.spark
@pytest.mark.postgresql
def test_analyze_over_the_store_equals_analyze_over_the_segment_files(
        spark, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = _history(tmp_path, postgres_url)
    url = _with_password(postgres_url)
    from_files, from_store = tmp_path / "files", tmp_path / "store"
    assert main(["analyze", str(data_dir), "--out", str(from_files), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["analyze", url, "--out", str(from_store), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "partitions in PostgreSQL" in out and PASSWORD not in out + err

    for name in TABLES:
        files_schema, files_rows = _rows(from_files, name)
        store_schema, store_rows = _rows(from_store, name)
        assert store_schema == files_schema, name
        assert store_rows == files_rows, name
        assert files_rows, f"{name} is empty: the scenario no longer exercises it"
    generations = pq.read_table(from_store / "group_generations").to_pylist()
    assert {row["group_type"] for row in generations} == {"classic", "consumer"}
    report = (from_store / "report.html").read_text()
    assert PASSWORD not in report and "***" in report


@pytest.mark.spark
@pytest.mark.postgresql
def test_the_jdbc_read_has_one_spark_partition_per_offsets_partition(
        spark, tmp_path: Path, postgres_url: str) -> None:
    data_dir = _history(tmp_path, postgres_url)
    inputs = list_store(postgres_url)
    expected = len(list(data_dir.glob("__consumer_offsets-*")))
    assert inputs.offsets_partitions >= expected > 1
    frame = StoreSource(inputs).offsets_batches(spark)
    assert frame.rdd.getNumPartitions() == inputs.offsets_partitions

    def partitions_in(index: int, rows):  # type: ignore[no-untyped-def]
        yield index, sorted({row.partition for row in rows})

    held = dict(frame.select("partition").rdd.mapPartitionsWithIndex(partitions_in).collect())
    with_batches = {index: found for index, found in held.items() if found}
    assert with_batches == {
        int(path.name.rsplit("-", 1)[1]): [int(path.name.rsplit("-", 1)[1])]
        for path in data_dir.glob("__consumer_offsets-*")}


@pytest.mark.postgresql
def test_offsets_dump_over_the_store_equals_the_dump_of_the_segment_files(
        tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = _history(tmp_path, postgres_url)
    capsys.readouterr()
    assert main(["offsets", "dump", str(data_dir)]) == 0
    from_files = capsys.readouterr().out
    assert main(["offsets", "dump", _with_password(postgres_url)]) == 0
    from_store, err = capsys.readouterr()
    assert from_store == from_files and from_files.count("\n") > 20
    assert err == ""


@pytest.mark.parametrize("command", ["analyze", "offsets dump"])
def test_a_store_that_cannot_be_reached_is_one_line_without_the_password(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    closed = f"postgresql://kgroups:{PASSWORD}@127.0.0.1:1/nowhere"
    argv = (["analyze", closed, "--out", str(tmp_path / "out")] if command == "analyze"
            else ["offsets", "dump", closed])
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"kgroups {command}: ")
    assert "kgroups:***@127.0.0.1:1/nowhere" in err
    assert PASSWORD not in err and "Traceback" not in err


def test_analyze_refuses_a_store_it_could_not_read_before_starting_spark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql://kgroups:{PASSWORD}@127.0.0.1:1/db"
    assert main(["analyze", url, str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "analysed alone" in capsys.readouterr().err
    monkeypatch.setenv("KGROUPS_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert main(["analyze", url, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make postgresql-jdbc" in err and PASSWORD not in err


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://kg:{PASSWORD}@db:5432/kgroups", "postgresql://kg:***@db:5432/kgroups"),
    (f"postgresql://kg@db/kgroups?sslmode=require&password={PASSWORD}",
     "postgresql://kg@db/kgroups?sslmode=require&password=***"),
    (f"postgresql://kg:{PASSWORD}@db:port/kgroups", "postgresql://kg:***@db:port/kgroups"),
])
def test_messages_name_a_store_without_its_password(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_the_password_reaches_the_jdbc_driver_as_a_property_not_in_its_url() -> None:
    jdbc_url, properties = jdbc_connection(
        f"postgresql://kg@db.internal:5433/kgroups?sslmode=require&password={PASSWORD}")
    assert jdbc_url == "jdbc:postgresql://db.internal:5433/kgroups?sslmode=require"
    assert properties["user"] == "kg" and properties["password"] == PASSWORD
    _, properties = jdbc_connection(f"postgresql://k%40g:{PASSWORD}@[::1]/kgroups")
    assert properties["user"] == "k@g" and properties["password"] == PASSWORD
