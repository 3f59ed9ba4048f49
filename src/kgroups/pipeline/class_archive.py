"""A class-data-sharing archive of the driver JVM's classes, written by the first run and mapped by
every later one, so that `kgroups analyze` starts in about half the time.

PySpark launches the driver JVM itself, and most of that JVM's cold start is loading and
verifying Spark's classes out of ~280 jars. HotSpot can dump the classes a run loaded into a
dynamic AppCDS archive when the JVM exits (`-XX:ArchiveClassesAtExit`) and map them from it in
later runs (`-XX:SharedArchiveFile`). Measured on a 2-core machine (JDK 17, local[2], a 154 MB
archive): SparkSession start 5.9-7.1 s -> 3.1-3.3 s, first mapInArrow job 4.6-5.5 s -> 3.1-3.4 s.

Validity. The JVM checks an archive against its own build and against the classpath (every jar's
name, place, size and mtime) and, under the default -Xshare:auto, ignores one that does not
match. The archive's file name carries a hash of the same things (the java binary and JDK files,
the Spark jars), so a new JDK or pyspark gets a new archive instead of one the JVM ignores for
ever. What the JVM does not survive is a damaged archive: a truncated one crashes it (SIGBUS
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
# A part file is only written while its JVM exits (about 10 s for 150 MB on a busy 2-core
# machine); one this old belongs to a JVM that was killed or whose Python never moved it.
_STALE_PART_SECONDS = 3600
_PROBE_TIMEOUT_SECONDS = 30


@dataclass(frozen=True, slots=True)
class ClassArchive:
    """Where the archive for this JDK and these Spark jars lives, and whether this run writes it.

    `part` is the file the JVM dumps into when it exits, for `finish_archive` to move to `path`;
    None when the archive is already in place and the JVM only maps it.
    """

    path: Path
    part: Path | None

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


def archive_key(java: Path, jars: Path) -> str:
    """A short hash of what makes an archive valid: the JDK (its java binary, its class image and
    libjvm, by size and mtime) and the classpath (the jars in directory order, as the java
    launcher expands `jars/*`, by name, size and mtime)."""
    jdk_home = java.parent.parent
    jdk_files = [java, jdk_home / "lib" / "modules", jdk_home / "lib" / "server" / "libjvm.so"]
    with os.scandir(jars) as entries:
        jar_files = [Path(entry.path) for entry in entries if entry.name.endswith(".jar")]
    digest = hashlib.sha256()
    for line in _file_stamps([path for path in jdk_files if path.exists()] + jar_files):
        digest.update(line.encode())
    return digest.hexdigest()[:16]


def _file_stamps(paths: Iterable[Path]) -> Iterable[str]:
    for path in paths:
        stat = path.stat()
        yield f"{path}\t{stat.st_size}\t{stat.st_mtime_ns}\n"


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
        path = directory / f"{_ARCHIVE_PREFIX}{archive_key(java, jars)}.jsa"
        if path.exists():
            if _jvm_starts_with(java, path):
                return ClassArchive(path, part=None)
            log.debug("class archive %s crashes the JVM; writing it again", path)
            path.unlink()
        directory.mkdir(parents=True, exist_ok=True)
        _remove_stale_parts(directory)
        return ClassArchive(path, part=_new_part_file(path))
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

