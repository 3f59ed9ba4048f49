"""The compiled form of the bytes every offset commit writes (native/record_batch, Rust through
PyO3, built by `make install` and `make serve`): the uncompressed RecordBatch v2 around a write's
records, and the offset commit's record key and value.

A commit's record encoding and batch assembly in Python were a dozen small `bytes` objects and
struct calls per record, about a tenth of the broker's CPU per OffsetCommit. Where the compiled
module is not built (`compiled` is None), the Python code beside each call runs instead: it is
also the reference the compiled code is tested against (tests/log/test_batch_native.py), and
gives the same bytes.
"""

from __future__ import annotations

from types import ModuleType

compiled: ModuleType | None
try:
    import kgroups_record_batch

    compiled = kgroups_record_batch
except ImportError:
    compiled = None
