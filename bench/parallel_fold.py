"""Fold several __consumer_offsets partitions at once, in forked worker processes.

Partitions share nothing until their groups are installed, so each can be read and folded to
its last raw value per key (`latest_values`) in its own process while this one decodes the
partitions already folded. Only the survivors travel back, as raw key and value bytes: decoding
them into the record model here costs no more than decoding them there, and pickled model
objects would cost more than both. Workers are forked so that `read` (usually a closure over
open logs) reaches them without pickling; where fork is unavailable, or with one worker, the
fold runs in this process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from kgroups.coordinator.bulk_load import latest_values
from kgroups.log.batch import BatchCorruptError

Folded = tuple[int, dict[bytes, bytes | None], int]  # partition, last value per key, walked
Reader = Callable[[int], bytes]

_reader: list[Reader] = []  # the forked worker's copy of `read`


def fold_partitions(read: Reader, partitions: Sequence[int], workers: int) -> Iterator[Folded]:
    """(partition, last value per key, records walked) for each partition, in the order given.
    `read(p)` returns all of p's batches in offset order; it runs in the worker. A worker's
    error (e.g. BatchCorruptError) is raised here when its partition's turn comes."""
    if workers <= 1 or len(partitions) <= 1 or not _can_fork():
        for partition in partitions:
            yield _fold(partition, read)
        return
    context = multiprocessing.get_context("fork")
    with context.Pool(min(workers, len(partitions)), _keep_reader, (read,)) as pool:
        for folded in pool.imap(_fold_in_worker, partitions):
            if isinstance(folded, _Corrupt):
                raise BatchCorruptError(folded.message, folded.position)
            yield folded
        pool.close()  # let the workers exit on their own (their CPU time is then accounted)
        pool.join()


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def _keep_reader(read: Reader) -> None:
    _reader.append(read)


@dataclass(frozen=True, slots=True)
class _Corrupt:
    """A BatchCorruptError on its way back: the error itself does not survive pickling (its
    constructor takes two arguments), and an unpicklable result would hang the pool."""

    message: str
    position: int


def _fold_in_worker(partition: int) -> Folded | _Corrupt:
    try:
        return _fold(partition, _reader[0])
    except BatchCorruptError as error:
        return _Corrupt(str(error), error.position)


def _fold(partition: int, read: Reader) -> Folded:
    latest, walked = latest_values(read(partition))
    return partition, latest, walked
