"""Reads a `__consumer_offsets` (or, for the transaction coordinator, `__transaction_state`)
partition back from the store when this broker becomes its coordinator; each coordinator has
a reader of its own.

On a thread and a connection of its own: a partition written for a long time (the store does
not compact it yet) can take a while to read, and the event loop must keep answering
meanwhile (the partition's groups get COORDINATOR_LOAD_IN_PROGRESS). One thread reads one
partition at a time, so a broker gaining many partitions at once loads them in turn without
stealing the loop's time or the database's connections.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from kgroups.broker.config import BrokerConfig
from kgroups.storage.postgresql import PostgresStore


class OffsetsReader:
    def __init__(self, url: str, session_timeout_ms: int) -> None:
        self._url = url
        self._session_timeout_ms = session_timeout_ms
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="offsets-reader")
        self._store: PostgresStore | None = None  # the reader thread's, opened on first use

    async def read(self, topic: str, partition: int) -> bytes:
        """Every batch of the partition, in offset order, as one byte string."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self._read, topic, partition)

    def _read(self, topic: str, partition: int) -> bytes:
        if self._store is None:
            self._store = PostgresStore.open(self._url, self._session_timeout_ms)
        try:
            return b"".join(self._store.batches(topic, partition))
        except Exception:
            # The connection may be broken: the next read opens a new one.
            self._store.close()
            self._store = None
            raise

    def close(self) -> None:
        self._executor.submit(self._close_store)
        self._executor.shutdown(wait=False)

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def cluster_reader(config: BrokerConfig) -> OffsetsReader | None:
    """A coordinator's reader in cluster mode (its partitions are loaded as their leases are
    gained); None for a broker on its own, which reads its local logs."""
    url = config.storage_url
    if url is None:
        return None
    return OffsetsReader(url, config.cluster_int("broker.session.timeout.ms"))
