"""ConsumerGroupMemberMetadataValue.ClassicMemberMetadata: what a consumer group keeps of a
member that still speaks the classic protocol (online migration, KIP-848).

Kafka stores it in the member's subscription record (type 5) as tagged field 0, a nullable
struct: its session timeout and the (name, metadata) protocols of its last JoinGroup. The
tagged field's bytes start with a presence byte (1: present; Kafka 4.3 writes a lone 0 for a
member without classic metadata), then the struct, flexible: int32 SessionTimeoutMs, compact
array of {compact string Name, compact bytes Metadata, tags}, tags.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.log.batch import uvarint
from kgroups.records.wire import (
    INT32,
    read_compact_array_length,
    read_compact_bytes,
    read_compact_string,
    read_int32,
    read_uvarint,
    skip_tagged_fields,
    write_compact_bytes,
    write_compact_nullable_string,
)

_PRESENT = 1


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


def encode_classic_member_metadata(metadata: ClassicMemberMetadata) -> bytes:
    parts = [uvarint(_PRESENT), INT32.pack(metadata.session_timeout_ms),
             uvarint(len(metadata.supported_protocols) + 1)]
    for name, protocol_metadata in metadata.supported_protocols:
        parts += [write_compact_nullable_string(name), write_compact_bytes(protocol_metadata),
                  b"\x00"]
    parts.append(b"\x00")
    return b"".join(parts)


def decode_classic_member_metadata(raw: bytes | None) -> ClassicMemberMetadata | None:
    """None for an absent field or one whose presence byte says null."""
    if raw is None:
        return None
    what = "ClassicMemberMetadata"
    present, pos = read_uvarint(raw, 0, f"{what} presence")
    if present != _PRESENT:
        return None
    session_timeout, pos = read_int32(raw, pos, f"{what} sessionTimeoutMs")
    count, pos = read_compact_array_length(raw, pos, f"{what} supportedProtocols")
    protocols = []
    for index in range(count):
        name, pos = read_compact_string(raw, pos, f"{what} supportedProtocols[{index}].name")
        data, pos = read_compact_bytes(raw, pos, f"{what} supportedProtocols[{index}].metadata")
        pos = skip_tagged_fields(raw, pos, f"{what} supportedProtocols[{index}]")
        protocols.append((name, data))
    skip_tagged_fields(raw, pos, what)
    return ClassicMemberMetadata(session_timeout, tuple(protocols))
