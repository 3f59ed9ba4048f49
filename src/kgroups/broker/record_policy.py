"""What a topic's settings ask of produced batches before they are appended, as Kafka's
LogValidator does it: a compacted topic refuses records without a key (compaction keeps the
last value per key, so a keyless record could never be cleaned), a CreateTime topic refuses
records timestamped further from the broker's clock than message.timestamp.before.max.ms /
after.max.ms allow, and a LogAppendTime topic has the broker stamp each batch with its own
clock.

The timestamp bounds are checked on each batch's header (its first and max timestamps), and
the records are read only when the header is out of bounds, to name the refused ones: reading
every record of every batch would cost ~9 us a record (docs/compatibility.md).

Records are read only for compacted topics, and then only as far as their keys; a
LogAppendTime stamp rewrites the batch header in place (timestamp-type bit, max timestamp,
CRC), leaving the records' own timestamps as produced, as Kafka does: readers take every
record's time from the batch's max timestamp.
"""

from __future__ import annotations

import struct

import crc32c

from kgroups.log.batch import (
    ATTRIBUTES_AT,
    CRC_AT,
    CRC_START,
    MAX_TIMESTAMP_AT,
    TIMESTAMP_LOG_APPEND,
    check_batch,
    keyless_records,
    read_header,
    records_of,
)

_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
# Kafka quotes at most this many record errors in the partition's error message.
QUOTED_RECORD_ERRORS = 3
# kgroups lists at most this many in the answer's record_errors (Kafka: all of them).
MAX_RECORD_ERRORS = 1000

RecordError = tuple[int, str]  # (index of the record in its batch, message)
NO_TIMESTAMP = -1


def keyless_record_errors(batches: list[bytes], topic: str, partition: int
                          ) -> tuple[int, list[RecordError]]:
    """For a compacted topic: how many records have no key, and the errors Kafka answers for
    the first MAX_RECORD_ERRORS of them (Kafka answers one per record: a batch of a million
    empty records would make a ~100 MB answer, which stalls Kafka 4.3.1 itself, measured)."""
    message = f"Compacted topic cannot accept message without key in topic partition " \
              f"{topic}-{partition}"
    total = 0
    errors: list[RecordError] = []
    for batch in batches:
        header, end = check_batch(batch, 0)
        count, indexes = keyless_records(batch, 0, end, header, MAX_RECORD_ERRORS - len(errors))
        total += count
        errors += [(index, message) for index in indexes]
    return total, errors


def timestamp_errors(batches: list[bytes], now_ms: int, before_max_ms: int,
                     after_max_ms: int) -> list[RecordError]:
    """One error per record whose CreateTime timestamp lies outside [now - before,
    now + after], for a batch whose header's first or max timestamp does."""
    low, high = now_ms - before_max_ms, now_ms + after_max_ms
    errors: list[RecordError] = []
    for batch in batches:  # each already passed by check_batch: its header is sound
        header = read_header(batch)
        if low <= header.base_timestamp <= high and low <= header.max_timestamp <= high:
            continue
        rows = records_of(batch, 0, len(batch), header, False)
        errors += [(index, f"Timestamp {timestamp} of message with offset {offset} is out of "
                           f"range. The timestamp should be within [{low}, {high}]")
                   for index, (offset, timestamp, *_) in enumerate(rows)
                   if timestamp != NO_TIMESTAMP and not low <= timestamp <= high]
    return errors[:MAX_RECORD_ERRORS]


def record_errors_message(errors: list[RecordError], total: int) -> str:
    """The partition-level message Kafka sends with record errors (Produce v8+)."""
    quoted = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                       for index, message in errors[:QUOTED_RECORD_ERRORS])
    return (f"One or more records have been rejected due to {total} record errors in "
            f"total, and only showing the first three errors at most: [{quoted}]")


def stamp_log_append_time(batch: bytes, now_ms: int) -> bytes:
    """The batch marked LogAppendTime with `now_ms` as its max timestamp, CRC recomputed."""
    stamped = bytearray(batch)
    (attributes,) = _INT16.unpack_from(stamped, ATTRIBUTES_AT)
    _INT16.pack_into(stamped, ATTRIBUTES_AT, attributes | TIMESTAMP_LOG_APPEND)
    _INT64.pack_into(stamped, MAX_TIMESTAMP_AT, now_ms)
    _UINT32.pack_into(stamped, CRC_AT, crc32c.crc32c(bytes(stamped[CRC_START:])))
    return bytes(stamped)
