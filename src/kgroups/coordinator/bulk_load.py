"""The replay fast path: the last value of every key in __consumer_offsets log bytes.

Loading a partition only needs each key's final record (later commits overwrite earlier ones,
the premise of log compaction), so this fold keeps raw key -> raw value and decodes nothing;
`PartitionImage.apply_raw` then decodes each survivor once. The batches a coordinator writes
(uncompressed, non-transactional) are located with numpy (`bulk_scan`), and the last record per
key is picked by comparing keys as 8-byte words in numpy too (or, for keys over 64 bytes, by
one dict built in C from every key in log order), so no Python code runs per record. Any other
batch in the bytes (compressed, transactional, control) sends the whole chunk through
`kgroups.log.replay.LatestPerKey`, the general walker that honours transaction markers. CRCs
are checked either way.
"""

from __future__ import annotations

import numpy as np

from kgroups.log.batch import COMPRESSION_MASK, CONTROL, TRANSACTIONAL
from kgroups.log.bulk_scan import last_of_each_key, scan_batches, scan_records
from kgroups.log.replay import LatestPerKey

_NOT_PLAIN = COMPRESSION_MASK | TRANSACTIONAL | CONTROL
# (producer id, producer epoch) -> (key, value) of each record of a transaction still open.
OpenTransactions = dict[tuple[int, int], list[tuple[bytes, bytes | None]]]


def latest_values(
    data: bytes, open_transactions: OpenTransactions | None = None,
) -> tuple[dict[bytes, bytes | None], int]:
    """(last value per key, data records walked) for a partition's whole batches in offset
    order (pass all of them at once: a transaction may span any split). A None value is a
    tombstone; keyless records are not state and are dropped. Raises BatchCorruptError (with
    the byte position) on bad bytes. Transactions still without their marker fill
    `open_transactions` ((producer id, epoch) -> raw key and value of each record), if given."""
    if not data:
        return {}, 0
    batches = scan_batches(data)
    if (batches.attributes & _NOT_PLAIN).any():
        table = LatestPerKey()
        table.add(data)
        if open_transactions is not None:
            for producer, rows in table.open_transactions().items():
                open_transactions[producer] = [(key, value) for _, _, key, value in rows]
        return {key: value for _, _, key, value in table.records()}, table.records_seen
    records = scan_records(data, batches)
    keyed = records.key_lengths >= 0
    key_starts = records.key_starts[keyed]
    key_lengths = records.key_lengths[keyed]
    winners = last_of_each_key(data, key_starts, key_lengths)
    if winners is None:
        # dict() keeps the last index it sees for a key: the record that wins.
        key_ends = key_starts + key_lengths
        last_index = dict(
            zip(map(data.__getitem__, map(slice, key_starts.tolist(), key_ends.tolist())),
                range(key_starts.size), strict=True)
        )
        winners = np.fromiter(last_index.values(), dtype=np.int64, count=len(last_index))
    starts = key_starts[winners].tolist()
    ends = (key_starts[winners] + key_lengths[winners]).tolist()
    value_starts = records.value_starts[keyed][winners].tolist()
    value_lengths = records.value_lengths[keyed][winners].tolist()
    return {
        data[start:end]: data[value_start : value_start + length] if length >= 0 else None
        for start, end, value_start, length in zip(
            starts, ends, value_starts, value_lengths, strict=True
        )
    }, int(batches.counts.sum())
