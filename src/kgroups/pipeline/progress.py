"""Progress while `kgroups analyze` runs: one line per step, with Spark's task counts for the
step's running stages, so a long decode shows it is moving and how far it got.

On a terminal the lines are live (rich: a spinner, a bar, the elapsed time). Anywhere else (a
log file, CI, a pipe) a live display would only be printed when the run ends, so each step
writes a plain line when it starts and one when it ends, with its tasks and seconds."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

# Spark's status tracker is polled this often; cheap (driver-local), and smooth enough to watch.
POLL_SECONDS = 0.3


class StepProgress:
    """Shows each step of a run; `enabled=False` runs the steps silently (tests, library use)."""

    def __init__(self, spark: SparkSession, enabled: bool = True,
                 console: Console | None = None) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._enabled = enabled
        console = console or Console(stderr=True)
        self._plain = enabled and not console.is_terminal
        self._console = console
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} tasks"),
            TimeElapsedColumn(),
            console=console,
            disable=not enabled or self._plain,
        )

    def __enter__(self) -> StepProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def _stage_counts(self) -> tuple[int, int]:
        done = total = 0
        for stage_id in self._tracker.getActiveStageIds():
            info = self._tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total

    def _line(self, text: str) -> None:
        print(f"kgroups analyze: {text}", file=self._console.file, flush=True)

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        """Run the body as one step; its Spark tasks are counted while it runs."""
        if self._plain:
            self._line(f"{description} ...")
        task = self._progress.add_task(description, total=None)
        finished = threading.Event()

        def watch() -> None:
            while not finished.wait(POLL_SECONDS):
                done, total = self._stage_counts()
                if total:
                    self._progress.update(task, completed=done, total=total)

        watcher = threading.Thread(target=watch, daemon=True)
        if self._enabled:
            watcher.start()
        started = time.monotonic()
        try:
            yield
        finally:
            finished.set()
            if self._enabled:
                watcher.join()
            elapsed = time.monotonic() - started
            tasks_seen = self._progress.tasks[task].total or 0
            self._progress.update(
                task, description=f"{description} ({elapsed:.1f} s)",
                completed=tasks_seen, total=tasks_seen,
            )
            if self._plain and sys.exc_info()[0] is None:
                tasks = f"{int(tasks_seen)} Spark tasks, " if tasks_seen else ""
                self._line(f"{description}: {tasks}{elapsed:.1f} s")
