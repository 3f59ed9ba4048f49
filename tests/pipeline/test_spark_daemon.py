"""The Python worker daemon imports pyspark from the installed package, not from the zip Spark
puts first on the workers' path (where nothing is compiled)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from kgroups.pipeline.spark_daemon import without_bundled_zips

INSTALLED = Path(pyspark.__file__).resolve().parent
SITE = str(INSTALLED.parent)
BUNDLED = [str(INSTALLED / "python" / "lib" / "pyspark.zip"),
           str(INSTALLED / "python" / "lib" / "py4j-0.10.9.9-src.zip")]


def test_zips_inside_the_installed_pyspark_are_dropped_and_the_rest_kept(tmp_path):
    other_zip = str(tmp_path / "deps.zip")
    path = [*BUNDLED, other_zip, str(tmp_path), SITE]
    assert without_bundled_zips(path) == [other_zip, str(tmp_path), SITE]


def test_without_an_installed_pyspark_the_zips_stay(tmp_path):
    # An executor that only has Spark's zips: pyspark cannot be imported from anywhere else.
    path = [*BUNDLED, str(tmp_path)]
    assert without_bundled_zips(path) == path


def test_without_py4j_beside_pyspark_the_zips_stay(tmp_path):
    # The installed pyspark on the path but py4j only in its zip: dropping it would lose py4j.
    (tmp_path / "pyspark").symlink_to(INSTALLED)
    path = [*BUNDLED, str(tmp_path)]
    assert without_bundled_zips(path) == path


@pytest.mark.spark
def test_workers_import_the_installed_pyspark(spark):
    def where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyspark as worker_pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"file": [worker_pyspark.__file__]})

    schema = StructType([StructField("file", StringType())])
    files = spark.range(0, 2, 1, 2).mapInArrow(where, schema).toArrow()["file"].to_pylist()
    assert {os.path.realpath(file) for file in files} == {os.path.realpath(pyspark.__file__)}
