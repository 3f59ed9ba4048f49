"""One gate per partition log, held from a write's checks to its append.

Produce holds it while it checks a request's batches and appends them, and the transaction
markers hold it to append a COMMIT or ABORT: writes to one partition pass in arrival order, so a
write waiting for its checks is never overtaken by a later one (an uncontended gate costs no
wait).
"""

from __future__ import annotations

import asyncio
import weakref

from kgroups.storage.log_seam import PartitionLogSeam

_GATES: weakref.WeakKeyDictionary[PartitionLogSeam, asyncio.Lock] = weakref.WeakKeyDictionary()


def gate_of(log: PartitionLogSeam) -> asyncio.Lock:
    """The log's gate, made on first use and dropped with the log."""
    gate = _GATES.get(log)
    if gate is None:
        gate = _GATES[log] = asyncio.Lock()
    return gate
