"""The driver JVM's class archive: where it lives, what it is keyed on, when a run writes or maps
it, that a damaged one costs a rewrite and never a run, and (with Spark) that the first run
writes it silently and the next maps it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home

from kgroups.pipeline.class_archive import (
    MAX_ARCHIVES,
    SILENCE_CDS_LOGGING,
    STALE_ARCHIVE_SECONDS,
    ClassArchive,
    archive_key,
    cache_dir,
    dependency_key,
    finish_archive,
    java_binary,
    plan_archive,
)

HOUR = 3600


def make_java(jdk: Path, exit_status: int = 0) -> Path:
    """A stand-in for a JDK's bin/java that exits with `exit_status` whatever it is asked."""
    java = jdk / "bin" / "java"
    java.parent.mkdir(parents=True, exist_ok=True)
    java.write_text(f"#!/bin/sh\nexit {exit_status}\n")
    java.chmod(0o755)
    return java


def make_spark_home(spark_home: Path, jars: dict[str, bytes]) -> Path:
    (spark_home / "jars").mkdir(parents=True, exist_ok=True)
    for name, content in jars.items():
        (spark_home / "jars" / name).write_bytes(content)
    return spark_home / "jars"


@pytest.fixture
def fake_install(tmp_path, monkeypatch) -> Path:
    """A fake JDK and pyspark install and an empty cache dir, all found through the environment
    the way Spark's launcher finds them; returns the cache dir."""
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    make_java(tmp_path / "jdk")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    make_spark_home(tmp_path / "spark", {"spark-core.jar": b"core", "scala-library.jar": b"lib"})
    monkeypatch.setenv("KGROUPS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_dir_is_kgroups_then_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KGROUPS_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "kgroups"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "kgroups"
    monkeypatch.setenv("KGROUPS_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_java_binary_is_java_home_else_path_resolved(tmp_path, monkeypatch):
    home_java = make_java(tmp_path / "home-jdk")
    path_java = make_java(tmp_path / "path-jdk")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").symlink_to(path_java)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert java_binary() == path_java
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "home-jdk"))
    assert java_binary() == home_java
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert java_binary() is None


def test_key_changes_with_the_java_binary_and_the_jars(tmp_path):
    java = make_java(tmp_path / "jdk")
    jars = make_spark_home(tmp_path / "spark", {"a.jar": b"a", "b.jar": b"b"})
    key = archive_key(java, jars)
    assert archive_key(java, jars) == key

    java.write_text(java.read_text() + "# another build\n")
    after_java_change = archive_key(java, jars)
    assert after_java_change != key

    stat = java.stat()
    os.utime(java, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**9))
    after_java_touch = archive_key(java, jars)
    assert after_java_touch not in (key, after_java_change)

    (jars / "b.jar").write_bytes(b"b, rebuilt")
    after_jar_change = archive_key(java, jars)
    assert after_jar_change != after_java_touch

    (jars / "c.jar").write_bytes(b"c")
    assert archive_key(java, jars) != after_jar_change


def test_missing_archive_is_written_at_exit_to_a_part_file_of_this_run(fake_install):
    first = plan_archive()
    second = plan_archive()
    assert first is not None and second is not None
    assert first.path == second.path
    assert first.path.parent == fake_install and first.path.suffix == ".jsa"
    assert not first.path.exists()
    # Two runs starting together dump to different files, in the archive's directory.
    assert first.part != second.part
    assert first.part is not None and first.part.parent == fake_install
    assert first.java_options == [f"-XX:ArchiveClassesAtExit={first.part}", SILENCE_CDS_LOGGING]


def test_present_archive_is_mapped(fake_install):
    written = plan_archive()
    assert written is not None
    written.path.write_bytes(b"an archive")
    mapped = plan_archive()
    assert mapped == ClassArchive(written.path, part=None, spark_home=written.spark_home)
    assert mapped.java_options == [f"-XX:SharedArchiveFile={written.path}", SILENCE_CDS_LOGGING]


def test_archive_that_fails_the_jvm_is_deleted_and_written_again(fake_install, tmp_path):
    written = plan_archive()
    assert written is not None
    written.path.write_bytes(b"an archive")
    # The same JDK by its stamps (size, mtime), but a JVM that dies with this archive.
    java_stat = (tmp_path / "jdk" / "bin" / "java").stat()
    java = make_java(tmp_path / "jdk", exit_status=1)
    os.utime(java, ns=(java_stat.st_atime_ns, java_stat.st_mtime_ns))

    plan = plan_archive()
    assert plan is not None and plan.path == written.path
    assert plan.part is not None
    assert not written.path.exists()


def second_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake install's jars again in another checkout: same names and sizes, another place,
    another install time; SPARK_HOME now points there."""
    jars = make_spark_home(tmp_path / "checkout-2" / "spark",
                           {"spark-core.jar": b"core", "scala-library.jar": b"lib"})
    for jar in jars.iterdir():
        os.utime(jar, (jar.stat().st_atime - HOUR, jar.stat().st_mtime - HOUR))
    monkeypatch.setenv("SPARK_HOME", str(jars.parent))
    return jars


def test_checkouts_of_one_dependency_set_share_the_archive_and_its_spark_home(
    fake_install, tmp_path, monkeypatch
):
    first = plan_archive()
    assert first is not None and first.spark_home is not None
    home = first.spark_home
    assert home.parent == fake_install
    # The jars are the first checkout's files (hard links: no disk), bin/ is copied.
    for jar in (tmp_path / "spark" / "jars").iterdir():
        assert (home / "jars" / jar.name).samefile(jar)
    first.path.write_bytes(b"an archive")

    java = tmp_path / "jdk" / "bin" / "java"
    jars = second_checkout(tmp_path, monkeypatch)
    assert dependency_key(java, jars) == dependency_key(java, tmp_path / "spark" / "jars")
    assert archive_key(java, jars) != archive_key(java, tmp_path / "spark" / "jars")
    second = plan_archive()
    assert second == ClassArchive(first.path, part=None, spark_home=home)
    assert list(fake_install.glob("*.jsa")) == [first.path]


def test_another_dependency_set_gets_its_own_archive(fake_install, tmp_path, monkeypatch):
    first = plan_archive()
    assert first is not None
    make_spark_home(tmp_path / "spark", {"spark-core.jar": b"core, next release"})
    other = plan_archive()
    assert other is not None and other.path != first.path and other.spark_home != first.spark_home


def test_a_spark_home_whose_jars_changed_is_rebuilt_with_its_archive(fake_install, tmp_path):
    first = plan_archive()
    assert first is not None and first.spark_home is not None
    first.path.write_bytes(b"an archive")
    # pip rewrote a jar in place: same name and size, new mtime, so the archive no longer fits.
    jar = first.spark_home / "jars" / "spark-core.jar"
    os.utime(jar, (jar.stat().st_atime + HOUR, jar.stat().st_mtime + HOUR))
    again = plan_archive()
    assert again is not None and again.part is not None and not first.path.exists()
    assert again.spark_home == first.spark_home


def test_without_hard_links_the_checkouts_own_spark_home_is_used(fake_install, monkeypatch):
    def refuse(*_: object, **__: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    plan = plan_archive()
    assert plan is not None and plan.spark_home is None
    assert list(fake_install.glob("spark-home-*")) == []


def test_stale_archives_and_their_spark_homes_are_pruned(fake_install):
    plan = plan_archive()
    assert plan is not None
    now = time.time()
    ages = {"old": STALE_ARCHIVE_SECONDS + HOUR, "recent": HOUR, "older": 2 * HOUR,
            "oldest-recent": 3 * HOUR}
    for key, age in ages.items():
        archive = fake_install / f"spark-driver-{key}.jsa"
        archive.write_bytes(b"another checkout's archive")
        (fake_install / f"spark-home-{key}" / "jars").mkdir(parents=True)
        os.utime(archive, (now - age, now - age))
    plan_archive()
    kept = sorted(p.name for p in fake_install.glob("*.jsa"))
    # Never more than MAX_ARCHIVES: this run's and the most recently used others.
    assert len(kept) + 1 == MAX_ARCHIVES  # this run's archive is not written yet
    assert kept == ["spark-driver-older.jsa", "spark-driver-recent.jsa"]
    homes = sorted(p.name for p in fake_install.glob("spark-home-*"))
    assert homes == sorted(["spark-home-older", "spark-home-recent", plan.spark_home.name])


def test_using_an_archive_keeps_it_from_pruning(fake_install):
    plan = plan_archive()
    assert plan is not None
    plan.path.write_bytes(b"an archive")
    old = time.time() - STALE_ARCHIVE_SECONDS - HOUR
    os.utime(plan.path, (old, old))
    plan_archive()
    assert plan.path.stat().st_mtime > time.time() - HOUR


def test_unwritable_cache_dir_means_no_archive_and_no_error(fake_install, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("KGROUPS_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    assert plan_archive() is None


def test_no_java_means_no_archive(fake_install, monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert plan_archive() is None
    assert not fake_install.exists()


def test_stale_part_files_are_removed_fresh_ones_kept(fake_install):
    plan = plan_archive()
    assert plan is not None and plan.part is not None
    stale = fake_install / f"{plan.path.name}.1-dead.part"
    fresh = fake_install / f"{plan.path.name}.2-busy.part"
    for part in (stale, fresh):
        part.write_bytes(b"half an archive")
    os.utime(stale, (stale.stat().st_atime - 2 * HOUR, stale.stat().st_mtime - 2 * HOUR))
    plan_archive()
    assert not stale.exists()
    assert fresh.exists() and plan.part.exists()


def start_fake_jvm(dumps_to: Path, exit_status: int) -> subprocess.Popen[bytes]:
    """A process that behaves like PySpark's gateway JVM with -XX:ArchiveClassesAtExit: it runs
    until its stdin closes, then writes the archive and exits."""
    program = textwrap.dedent(f"""
        import pathlib, sys
        sys.stdin.read()
        pathlib.Path({str(dumps_to)!r}).write_bytes(b"classes")
        sys.exit({exit_status})
    """)
    return subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE)


def test_finish_installs_the_archive_after_the_jvm_exited(fake_install):
    plan = plan_archive()
    assert plan is not None and plan.part is not None
    jvm = start_fake_jvm(plan.part, exit_status=0)
    assert finish_archive(plan, jvm, timeout=30)
    assert jvm.returncode == 0
    assert plan.path.read_bytes() == b"classes"
    assert not plan.part.exists()


def test_finish_discards_the_dump_of_a_failed_jvm(fake_install):
    plan = plan_archive()
    assert plan is not None and plan.part is not None
    jvm = start_fake_jvm(plan.part, exit_status=1)
    assert not finish_archive(plan, jvm, timeout=30)
    assert not plan.path.exists()
    assert not plan.part.exists()


def test_finish_gives_up_on_a_jvm_that_does_not_exit(fake_install):
    plan = plan_archive()
    assert plan is not None and plan.part is not None
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                           stdin=subprocess.PIPE)
    try:
        assert not finish_archive(plan, jvm, timeout=0.5)
        assert not plan.path.exists()
    finally:
        jvm.kill()
        jvm.wait()


@pytest.fixture
def real_java(fake_install, monkeypatch) -> Path:
    """The java on PATH instead of the fake JDK, with the fake Spark jars and cache dir."""
    monkeypatch.delenv("JAVA_HOME")
    java = java_binary()
    if java is None:
        pytest.skip("no java on PATH")
    return java


def test_truncated_archive_is_caught_before_the_driver_maps_it(real_java, tmp_path):
    """A truncated dynamic archive crashes HotSpot (SIGBUS) at startup instead of being ignored;
    here a real JVM dumps a small one in a fraction of a second."""
    plan = plan_archive()
    assert plan is not None and plan.part is not None
    whole = tmp_path / "whole.jsa"
    subprocess.run([str(real_java), f"-XX:ArchiveClassesAtExit={whole}", SILENCE_CDS_LOGGING,
                    "-version"], check=True, capture_output=True)
    archive_bytes = whole.read_bytes()

    plan.path.write_bytes(archive_bytes)
    assert plan_archive() == ClassArchive(plan.path, part=None, spark_home=plan.spark_home)

    plan.path.chmod(0o644)
    plan.path.write_bytes(archive_bytes[: len(archive_bytes) // 2])
    rewrite = plan_archive()
    assert rewrite is not None and rewrite.part is not None
    assert not plan.path.exists()
    assert list(Path.cwd().glob("hs_err*")) == []


# --- With Spark: each run is a fresh Python process launching its own driver JVM. ---

RUN_PROGRAM = textwrap.dedent("""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kgroups.pipeline.session import build_session, stop_session, writes_class_archive

    def double(batches):
        for batch in batches:
            yield pa.RecordBatch.from_arrays([pc.multiply(batch.column(0), 2)], ["id"])

    spark = build_session("local[1]")
    print("JAVA OPTIONS", spark.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
    doubled = spark.range(0, 4, 1, 2).mapInArrow(double, "id long").toArrow()
    print("ROWS", sorted(doubled.column("id").to_pylist()))
    print("STOP WAITS FOR THE ARCHIVE", writes_class_archive())
    stop_session(spark)
""")


def run_analysis_process(cache: Path, work_dir: Path, **more_env: str) -> str:
    """Run a tiny mapInArrow job in a new process; its stdout and stderr together."""
    work_dir.mkdir(exist_ok=True)
    env = {**os.environ, "KGROUPS_CACHE_DIR": str(cache), **more_env}
    done = subprocess.run([sys.executable, "-c", RUN_PROGRAM], cwd=work_dir, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "ROWS [0, 2, 4, 6]" in output
    # HotSpot's unified logging ("[0.1s][warning][cds] ...") and crash banners stay out.
    for noise in ("[cds", "warning]", "fatal error"):
        assert noise not in output, output
    assert list(work_dir.glob("hs_err*")) == []
    return output


def archives_in(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.jsa"))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[Path, str]:
    """One run with an empty cache dir (whose name needs quoting in Java options)."""
    cache = tmp_path_factory.mktemp("class archive") / "kgroups cache"
    return cache, run_analysis_process(cache, cache.parent / "work")


@pytest.mark.spark
def test_first_run_writes_the_archive_silently(first_run):
    cache, output = first_run
    assert "-XX:ArchiveClassesAtExit=" in output
    assert "STOP WAITS FOR THE ARCHIVE True" in output
    [archive] = archives_in(cache)
    assert archive.stat().st_size > 10_000_000
    assert list(cache.glob("*.part")) == []


@pytest.mark.spark
def test_next_run_maps_the_archive(first_run):
    cache, _ = first_run
    [archive] = archives_in(cache)
    output = run_analysis_process(cache, cache.parent / "work")
    assert f"-XX:SharedArchiveFile={archive}" in output
    assert "STOP WAITS FOR THE ARCHIVE False" in output
    assert archives_in(cache) == [archive]


@pytest.mark.spark
def test_another_checkout_maps_the_same_archive(first_run, tmp_path):
    """A second checkout of the same pyspark (its jars elsewhere) maps the first one's archive,
    and the JVM really uses it: -Xshare:on makes a JVM that cannot use its archive fail."""
    cache, _ = first_run
    [archive] = archives_in(cache)
    installed = Path(_find_spark_home())
    checkout = tmp_path / "checkout-2" / "pyspark"
    (checkout / "jars").mkdir(parents=True)
    for jar in (installed / "jars").glob("*.jar"):
        (checkout / "jars" / jar.name).symlink_to(jar.resolve())
    shutil.copytree(installed / "bin", checkout / "bin")
    output = run_analysis_process(cache, cache.parent / "work", SPARK_HOME=str(checkout),
                                  JDK_JAVA_OPTIONS="-Xshare:on")
    assert f"-XX:SharedArchiveFile={archive}" in output
    assert "STOP WAITS FOR THE ARCHIVE False" in output
    assert archives_in(cache) == [archive]


@pytest.mark.spark
def test_truncated_archive_costs_a_rewrite_not_the_run(first_run):
    cache, _ = first_run
    [archive] = archives_in(cache)
    whole_size = archive.stat().st_size
    archive.chmod(0o644)
    with archive.open("r+b") as file:
        file.truncate(whole_size // 2)
    output = run_analysis_process(cache, cache.parent / "work")
    assert "-XX:ArchiveClassesAtExit=" in output
    assert archives_in(cache) == [archive]
    assert archive.stat().st_size > whole_size // 2
