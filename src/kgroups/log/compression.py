"""Record-batch compression codecs (attribute bits 0-2), all through cramjam.

Snappy needs care: the Java client wraps raw snappy blocks in xerial's stream framing, other
clients write raw snappy, and both are valid inside a Kafka batch, so decoding accepts either and
encoding writes the xerial framing that every Kafka reader accepts. LZ4 is the standard LZ4 frame
format (magic v2 batches never use the broken pre-KIP-57 header checksum).
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """Compressed bytes that the named codec cannot decompress."""


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        return _xerial_snappy(data)
    if codec is Compression.LZ4:
        return _lz4_frame(data)
    return bytes(cramjam.zstd.compress(data))


def decompress(codec: Compression, data: bytes) -> bytes:
    try:
        if codec is Compression.NONE:
            return data
        if codec is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec is Compression.SNAPPY:
            if data.startswith(XERIAL_MAGIC):
                return _unxerial_snappy(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec is Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"{codec.name.lower()} data does not decompress: {exc}") from exc
    raise CompressionError(f"unknown compression codec {int(codec)}")


def _lz4_frame(data: bytes) -> bytes:
    """An LZ4 frame with independent blocks: Kafka's Java reader decompresses each block on its
    own, so linked blocks (cramjam's default) would break batches over one 64 KiB block."""
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _xerial_snappy(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _unxerial_snappy(data: bytes) -> bytes:
    pos = len(_XERIAL_HEADER)
    out = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError(f"xerial snappy block length cut short at byte {pos}")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CompressionError(f"xerial snappy block at byte {pos} overruns the data")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)
