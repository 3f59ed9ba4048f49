"""A class-data-sharing archive of the driver JVM's classes, written by the first run and mapped by
every later one, so that `kgroups analyze` starts in about half the time.

PySpark launches the driver JVM itself, and most of that JVM's cold start is loading and
verifying Spark's classes out of ~280 jars. HotSpot can dump the classes a run loaded into a
dynamic AppCDS archive when the JVM exits (`-XX:ArchiveClassesAtExit`) and map them from it in
later runs (`-XX:SharedArchiveFile`). Measured on a 2-core machine (JDK 17, local[2], a 154 MB
archive): SparkSession start 5.9-7.1 s -> 3.1-3.3 s, first mapInArrow job 4.6-5.5 s -> 3.1-3.4 s.

Validity. The JVM checks an archive against its own build and against the classpath (every jar's
name, place, size and mtime) and, under the default -Xshare:auto, ignores one that does not
match. Every checkout (every virtualenv) has its own copy of pyspark's jars, at its own place
and with its own install-time mtimes, so an archive dumped for one is useless to the others.
To share one archive between checkouts of the same dependency set, the driver is launched from
a Spark home in the cache, `spark-home-<key>`, whose jars are hard links to the first
checkout's (no copy: same file system as the cache, else no sharing) and whose bin/ holds
Spark's launch scripts: every checkout then hands the JVM the same classpath. The key (in both
names) hashes the JDK (java binary, class image and libjvm, by path, size and mtime) and the
dependency set (each jar's name and size), not the checkout's path, so a new JDK or pyspark
gets a new archive instead of one the JVM ignores for ever. Where hard links cannot be made,
the checkout's own Spark home is used and the key also covers its jars' paths and mtimes.

Pruning. Each run that maps an archive touches it. Archives of other keys are deleted once
unused for STALE_ARCHIVE_SECONDS, and beyond the MAX_ARCHIVES most recently used whatever their
age; a Spark home in the cache goes with its archive.

Damage. What the JVM does not survive is a damaged archive: a truncated one crashes it (SIGBUS
while relocating the archive) before Spark starts. So an archive is installed only once the JVM
that wrote it has exited cleanly, and one already in place is tried on a bare `java -version`
(0.1 s) before a run relies on it; one that crashes that JVM is deleted and written anew.

Concurrency. A run that writes the archive has its JVM dump to a part file of its own, which
`finish_archive` moves into place (os.replace) after that JVM exited: concurrent first runs each
write their own and the last move wins, and a JVM only ever opens a whole archive.

HotSpot reports on CDS on stdout: hundreds of `[warning][cds] Skipping ...: Signed JAR` lines
while dumping, a `[warning][cds,dynamic]` line for an archive it cannot use. `-Xlog:cds*=off`
turns off every tag set with `cds` in it, and with it all of these.

Nothing here may fail a run: any OSError means no archive this time, logged at debug level.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home

from kgroups.log.partition_log import fsync_path

log = logging.getLogger("kgroups.analyze.class_archive")

SILENCE_CDS_LOGGING = "-Xlog:cds*=off"
_ARCHIVE_PREFIX = "spark-driver-"
_HOME_PREFIX = "spark-home-"
# What a Spark home in the cache needs for PySpark to launch the driver from it: the jars and
# bin/spark-submit with the scripts it sources. The Python workers import the installed pyspark
# (PYSPARK_PYTHON), so its python/ is not needed.
_HOME_STAMP = ".jars"
# Archives of other JDKs or dependency sets (another checkout, an older pyspark) are kept while
# used within this time, and never more than this many in all (154 MB each).
STALE_ARCHIVE_SECONDS = 7 * 24 * 3600
MAX_ARCHIVES = 3
# A part file is only written while its JVM exits (about 10 s for 150 MB on a busy 2-core
# machine); one this old belongs to a JVM that was killed or whose Python never moved it.
_STALE_PART_SECONDS = 3600
_PROBE_TIMEOUT_SECONDS = 30


@dataclass(frozen=True, slots=True)
class ClassArchive:
    """Where the archive for this JDK and these Spark jars lives, and whether this run writes it.

    `part` is the file the JVM dumps into when it exits, for `finish_archive` to move to `path`;
    None when the archive is already in place and the JVM only maps it. `spark_home` is the
    SPARK_HOME the driver must be launched from for its classpath to be the archive's (None:
    the checkout's own).
    """

    path: Path
    part: Path | None
    spark_home: Path | None = None

    @property
    def java_options(self) -> list[str]:
        """The JVM options that write or use the archive, with HotSpot's CDS reports silenced."""
        if self.part is None:
            return [f"-XX:SharedArchiveFile={self.path}", SILENCE_CDS_LOGGING]
        return [f"-XX:ArchiveClassesAtExit={self.part}", SILENCE_CDS_LOGGING]


def cache_dir() -> Path:
    """$KGROUPS_CACHE_DIR, else $XDG_CACHE_HOME/kgroups, else ~/.cache/kgroups."""
    if explicit := os.environ.get("KGROUPS_CACHE_DIR"):
        return Path(explicit)
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "kgroups"
    return Path.home() / ".cache" / "kgroups"


def java_binary() -> Path | None:
    """The java that Spark's launcher (bin/spark-class) will run: $JAVA_HOME/bin/java, else the
    first `java` on PATH; resolved through symlinks (/usr/bin/java -> /etc/alternatives -> ...)."""
    if java_home := os.environ.get("JAVA_HOME"):
        candidate: str | None = os.path.join(java_home, "bin", "java")
    else:
        candidate = shutil.which("java")
    if candidate is None or not os.path.isfile(candidate):
        return None
    return Path(os.path.realpath(candidate))


def spark_jars_dir() -> Path | None:
    """The jars directory that bin/spark-class puts on the classpath of the installed pyspark."""
    jars = Path(_find_spark_home()) / "jars"
    return jars if jars.is_dir() else None


def _jdk_files(java: Path) -> list[Path]:
    jdk_home = java.parent.parent
    candidates = [java, jdk_home / "lib" / "modules", jdk_home / "lib" / "server" / "libjvm.so"]
    return [path for path in candidates if path.exists()]


def _jars(directory: Path) -> list[Path]:
    """The jars in directory order, as the java launcher expands `jars/*`."""
    with os.scandir(directory) as entries:
        return [Path(entry.path) for entry in entries if entry.name.endswith(".jar")]


def dependency_key(java: Path, jars: Path) -> str:
    """A short hash of the JDK (its files by path, size and mtime) and of the dependency set
    (each jar by name and size): the same in every checkout of the same pyspark on the same
    JDK."""
    digest = hashlib.sha256()
    for line in _file_stamps(_jdk_files(java)):
        digest.update(line.encode())
    for jar in sorted(_jars(jars)):
        digest.update(f"{jar.name}\t{jar.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def archive_key(java: Path, jars: Path) -> str:
    """A short hash of what makes an archive valid for jars at their own place: the JDK and the
    classpath (the jars in directory order, by path, size and mtime)."""
    digest = hashlib.sha256()
    for line in _file_stamps(_jdk_files(java) + _jars(jars)):
        digest.update(line.encode())
    return digest.hexdigest()[:16]


def _file_stamps(paths: Iterable[Path]) -> Iterable[str]:
    for path in paths:
        stat = path.stat()
        yield f"{path}\t{stat.st_size}\t{stat.st_mtime_ns}\n"


def _jar_stamps(jars: Path) -> str:
    return "".join(f"{p.name}\t{p.stat().st_size}\t{p.stat().st_mtime_ns}\n"
                   for p in sorted(_jars(jars)))


def shared_spark_home(directory: Path, key: str, jars: Path) -> Path | None:
    """The cache's Spark home for dependency set `key`, made from `jars` (and the bin/ beside
    it) when missing: hard links, so it costs no disk. None when links cannot be made here (the
    cache on another file system).

    It is built under a name of its own and renamed into place, so a concurrent run sees it
    whole or not at all. One whose jars changed since (a file rewritten in place) is rebuilt,
    and its archive, dumped against the old jars, deleted."""
    home = directory / f"{_HOME_PREFIX}{key}"
    stamp = home / _HOME_STAMP
    if stamp.exists():
        if stamp.read_text() == _jar_stamps(home / "jars"):
            return home
        log.debug("Spark home %s changed; building it again", home)
        (directory / f"{_ARCHIVE_PREFIX}{key}.jsa").unlink(missing_ok=True)
        shutil.rmtree(home)
    building = Path(tempfile.mkdtemp(dir=directory, prefix=f"{home.name}.{os.getpid()}-"))
    try:
        (building / "jars").mkdir()
        for jar in _jars(jars):
            os.link(jar.resolve(), building / "jars" / jar.name)
        source_bin = jars.parent / "bin"
        if source_bin.is_dir():
            shutil.copytree(source_bin, building / "bin", symlinks=False)
        (building / _HOME_STAMP).write_text(_jar_stamps(building / "jars"))
        try:
            building.rename(home)
        except OSError:
            if not (home / _HOME_STAMP).exists():
                raise
            # Another run put the same home in place first.
            shutil.rmtree(building)
        return home
    except OSError as exc:
        log.debug("no shared Spark home: %s", exc)
        shutil.rmtree(building, ignore_errors=True)
        return None


def prune_archives(directory: Path, keep: Path) -> None:
    """Delete the archives (and their Spark homes) that are stale: unused for
    STALE_ARCHIVE_SECONDS, or past the MAX_ARCHIVES most recently used. `keep` always stays."""
    others = []
    for archive in directory.glob(f"{_ARCHIVE_PREFIX}*.jsa"):
        if archive != keep:
            try:
                others.append((archive.stat().st_mtime, archive))
            except OSError:
                continue
    others.sort(reverse=True)
    too_old = time.time() - STALE_ARCHIVE_SECONDS
    for rank, (used, archive) in enumerate(others, start=1):
        if used < too_old or rank >= MAX_ARCHIVES:
            key = archive.name.removeprefix(_ARCHIVE_PREFIX).removesuffix(".jsa")
            try:
                archive.unlink()
                shutil.rmtree(directory / f"{_HOME_PREFIX}{key}", ignore_errors=True)
            except OSError as exc:
                log.debug("stale class archive %s left: %s", archive, exc)
    # A Spark home whose archive was never installed (its first run killed) goes once stale.
    for home in directory.glob(f"{_HOME_PREFIX}*"):
        key = home.name.removeprefix(_HOME_PREFIX)
        archive = directory / f"{_ARCHIVE_PREFIX}{key}.jsa"
        try:
            if archive != keep and not archive.exists() and home.stat().st_mtime < too_old:
                shutil.rmtree(home)
        except OSError as exc:
            log.debug("stale Spark home %s left: %s", home, exc)


def plan_archive() -> ClassArchive | None:
    """The archive a JVM about to start should use or, when there is none yet, write.

    None when no archive can be had this time: no java or Spark jars found, an unwritable cache
    dir, or any other OSError (the run then starts as it would without this module).
    """
    java = java_binary()
    jars = spark_jars_dir()
    if java is None or jars is None:
        log.debug("no class archive: java or the Spark jars not found")
        return None
    try:
        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        key = dependency_key(java, jars)
        home = shared_spark_home(directory, key, jars)
        if home is None:
            key = archive_key(java, jars)
        path = directory / f"{_ARCHIVE_PREFIX}{key}.jsa"
        prune_archives(directory, keep=path)
        if path.exists():
            if _jvm_starts_with(java, path):
                os.utime(path)  # used now: pruning keeps the archives in use
                return ClassArchive(path, part=None, spark_home=home)
            log.debug("class archive %s crashes the JVM; writing it again", path)
            path.unlink()
        _remove_stale_parts(directory)
        return ClassArchive(path, part=_new_part_file(path), spark_home=home)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("no class archive: %s", exc)
        return None


def _jvm_starts_with(java: Path, archive: Path) -> bool:
    """Whether a bare JVM starts with the archive mapped, the way the driver will map it.

    A small heap keeps compressed oops on, as in the 2 GB driver, so that this JVM maps the
    archive rather than rejecting it for a different object layout. Relocating the archive (the
    default since 17.0.x, forced here for JDKs where it is not) rewrites pointers all through it,
    so a truncated archive crashes this JVM rather than the driver. A crash writes no hs_err
    file and no core dump.
    """
    probe = subprocess.run(
        [str(java), "-Xmx64m", f"-XX:SharedArchiveFile={archive}", SILENCE_CDS_LOGGING,
         "-XX:+IgnoreUnrecognizedVMOptions", "-XX:+UnlockDiagnosticVMOptions",
         "-XX:ArchiveRelocationMode=1",
         "-XX:-CreateCoredumpOnCrash", f"-XX:ErrorFile={os.devnull}", "-version"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        timeout=_PROBE_TIMEOUT_SECONDS, check=False,
    )
    return probe.returncode == 0


def _new_part_file(archive: Path) -> Path:
    """A name no other run uses, claimed by creating the file (which also proves the directory
    writable); the JVM replaces it when it dumps."""
    fd, part = tempfile.mkstemp(
        dir=archive.parent, prefix=f"{archive.name}.{os.getpid()}-", suffix=".part"
    )
    os.close(fd)
    return Path(part)


def _remove_stale_parts(directory: Path) -> None:
    too_old = time.time() - _STALE_PART_SECONDS
    for part in directory.glob(f"{_ARCHIVE_PREFIX}*.part"):
        try:
            if part.stat().st_mtime < too_old:
                part.unlink()
        except OSError as exc:
            log.debug("stale class archive part %s left: %s", part, exc)


def finish_archive(archive: ClassArchive, jvm: subprocess.Popen[bytes], timeout: float) -> bool:
    """End the JVM that dumps `archive` at exit and move the archive into place.

    PySpark's gateway JVM exits when its stdin closes. It is given `timeout` seconds to dump and
    exit; the archive is installed only when it exited with status 0 (a dump that fails to
    write exits with 1, a killed JVM with a signal), after an fsync so that a machine crash
    cannot leave a half-written archive under the final name. False when nothing was installed.
    """
    assert archive.part is not None, "finish_archive is for a JVM that writes the archive"
    try:
        if jvm.stdin is not None:
            jvm.stdin.close()
        exit_status = jvm.wait(timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        # A JVM still dumping keeps its part file fresh; a later run removes it once stale.
        log.debug("class archive not installed, the JVM did not exit: %s", exc)
        return False
    try:
        if exit_status != 0 or archive.part.stat().st_size == 0:
            log.debug("class archive not written (JVM exit status %s)", exit_status)
            archive.part.unlink()
            return False
        fsync_path(archive.part)
        os.replace(archive.part, archive.path)
    except OSError as exc:
        log.debug("class archive not installed: %s", exc)
        return False
    return True

