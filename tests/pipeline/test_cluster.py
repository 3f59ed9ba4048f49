"""`kgroups analyze` on a Spark standalone cluster (a master and two workers on 127.0.0.1, each
worker with its own work directory), reading the __consumer_offsets segments from an
S3-compatible object store (moto's server) and the topic logs from a local directory: its
tables must equal those of the same data analysed from local paths in local mode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer
from tests.pipeline.spark_cluster import SparkStandalone
from tests.pipeline.test_analyze import build_scenario

from kgroups.pipeline.job import run_analysis

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BUCKET = "kgroups-logs"
# moto takes any credentials; the workers and the driver get them as an AWS deployment would.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def object_store() -> Iterator[str]:
    """An S3 endpoint on 127.0.0.1 with an empty bucket BUCKET."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, **_boto_credentials()).create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


def _boto_credentials() -> dict[str, str]:
    return {"aws_access_key_id": AWS_ENV["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            "region_name": AWS_ENV["AWS_REGION"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """Started in the background: the test prepares its data and the local run meanwhile."""
    standalone = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    standalone.start_in_background(env=AWS_ENV)
    yield standalone
    standalone.stop()


def _upload(endpoint: str, local: Path, prefix: str) -> None:
    s3 = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
    for path in sorted(local.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(local)}")


def _rows(out: Path, name: str) -> list[str]:
    """A table's rows in a canonical order (parts written by different tasks come in any)."""
    return sorted(repr(sorted(row.items())) for row in pq.read_table(out / name).to_pylist())


def test_standalone_cluster_reading_s3_gives_the_local_tables(
    spark, cluster: SparkStandalone, object_store: str, tmp_path: Path
) -> None:
    data = build_scenario(tmp_path / "data").data_dir
    local_out = tmp_path / "local-out"
    run_analysis(spark, [str(data)], str(local_out))

    # The offsets log goes to the object store; the topic logs stay on a local path.
    offsets, topics = tmp_path / "offsets", tmp_path / "topics"
    for partition_dir in data.iterdir():
        target = offsets if partition_dir.name.startswith("__consumer_offsets-") else topics
        shutil.copytree(partition_dir, target / partition_dir.name)
    _upload(object_store, offsets, "prod/logs")

    cluster.wait_started()
    cluster_out = tmp_path / "cluster-out"
    result = subprocess.run(
        [sys.executable, "-m", "kgroups.cli", "analyze", f"s3://{BUCKET}/prod/logs",
         str(topics), "--out", str(cluster_out), "--master", cluster.master_url,
         "--s3-endpoint", object_store, "--quiet"],
        env={**os.environ, **AWS_ENV, "SPARK_LOCAL_IP": "127.0.0.1",
             "SPARK_EXECUTOR_MEMORY": "512m"},
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]

    names = sorted(p.name for p in local_out.iterdir() if p.is_dir())
    assert "lag" in names and "offset_commits" in names
    assert sorted(p.name for p in cluster_out.iterdir() if p.is_dir()) == names
    for name in names:
        assert _rows(cluster_out, name) == _rows(local_out, name), name
    # Both workers ran tasks: each launched an executor in its own work directory.
    for number in range(cluster.workers):
        assert list((cluster.workdir / f"worker-{number}").glob("app-*/*/stderr")), number
