"""Record batches (message format v2) rewritten as the message sets Fetch v0-v3 carry: magic 0
for v0-v1, magic 1 (with timestamps) for v2-v3, as Kafka 3.9 converted them down for clients
older than Kafka 0.11 (Burrow 1.2 with its sample `kafka-version` 0.10.0 is one).

Each record becomes one uncompressed message with its offset, timestamp (magic 1), key and
value; headers cannot be carried and are dropped, control batches (transaction markers) are
left out, and records before the fetch offset are skipped, as in Kafka. Kafka re-compresses
a compressed batch into a wrapper message; kgroups sends the messages uncompressed, which
every reader of the old format accepts.
"""

from __future__ import annotations

import struct
import zlib

from kgroups.log.batch import CONTROL, TIMESTAMP_LOG_APPEND, check_batch, records_of

_OFFSET_SIZE_CRC = struct.Struct(">qiI")
_MAGIC_ATTRIBUTES = struct.Struct(">bb")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_NULL = _LENGTH.pack(-1)
# Offset, size, CRC, magic, attributes, key and value lengths (+ the timestamp in magic 1).
_SMALLEST_MESSAGE = {0: 26, 1: 34}


def fetch_magic(fetch_version: int) -> int:
    """The message format a Fetch version reads: 0 up to v1, 1 for v2-v3."""
    return 0 if fetch_version <= 1 else 1


def _sized(data: bytes | None) -> bytes:
    return _NULL if data is None else _LENGTH.pack(len(data)) + data


def legacy_message(offset: int, magic: int, timestamp: int, key: bytes | None,
                   value: bytes | None, log_append_time: bool) -> bytes:
    """One message of format `magic` (0 or 1), uncompressed, its CRC-32 computed."""
    attributes = TIMESTAMP_LOG_APPEND if magic == 1 and log_append_time else 0
    body = _MAGIC_ATTRIBUTES.pack(magic, attributes)
    if magic == 1:
        body += _TIMESTAMP.pack(timestamp)
    body += _sized(key) + _sized(value)
    return _OFFSET_SIZE_CRC.pack(offset, 4 + len(body), zlib.crc32(body)) + body


def down_convert(records: bytes, magic: int, fetch_offset: int, max_bytes: int) -> bytes:
    """The messages of the records at or after `fetch_offset` in `records` (whole v2
    batches), up to `max_bytes` of them but at least one, as Kafka always sends the first.

    Only the records that can reach the answer are parsed: a record's message takes at least
    `_SMALLEST_MESSAGE` bytes, and offsets grow at least one a record, so a batch is read no
    further than the fetch offset plus what `max_bytes` can hold (a megabyte of compressed
    empty records would otherwise cost seconds and a few hundred megabytes to convert whole)."""
    out = bytearray()
    records = bytes(records)  # a no-op for bytes; a file read may hand a memoryview
    pos = 0
    while pos < len(records):
        header, end = check_batch(records, pos)
        batch_pos, pos = pos, end
        if header.attributes & CONTROL:
            continue
        room = max(max_bytes - len(out), 0) // _SMALLEST_MESSAGE[magic] + 1
        needed = max(fetch_offset - header.base_offset, 0) + room
        log_append_time = bool(header.attributes & TIMESTAMP_LOG_APPEND)
        for offset, timestamp, key, value in records_of(records, batch_pos, end, header, False,
                                                        limit=needed):
            if offset < fetch_offset:
                continue
            message = legacy_message(offset, magic, timestamp, key, value, log_append_time)
            if out and len(out) + len(message) > max_bytes:
                return bytes(out)
            out += message
    return bytes(out)
