"""The key layout every KIP-848-style group record shares in __consumer_offsets (consumer,
share and streams groups): the record type, the group id, and for a member's records (or a
consumer group's regular expression) one more string."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgroups.records.wire import INT16, fail, read_string, write_string


def encode_group_key(key_type: int, group: str, second: str | None = None) -> bytes:
    parts = [INT16.pack(key_type), write_string(group)]
    if second is not None:
        parts.append(write_string(second))
    return b"".join(parts)


def decode_group_key(key_type: int, data: bytes, group_keys: Mapping[int, type[Any]],
                     second_keys: Mapping[int, type[Any]],
                     second_labels: Mapping[int, str] | None = None) -> Any:
    """`data` is the whole key, type included: a key of `group_keys` holds the group id, one
    of `second_keys` the group id and a second string (a member id unless `second_labels`
    names it otherwise, for error messages)."""
    group, pos = read_string(data, 2, f"key type {key_type} groupId")
    if key_type in group_keys:
        key = group_keys[key_type](group)
    else:
        label = (second_labels or {}).get(key_type, "memberId")
        second, pos = read_string(data, pos, f"key type {key_type} {label}")
        key = second_keys[key_type](group, second)
    if pos != len(data):
        raise fail(f"key type {key_type}", pos, f"{len(data) - pos} unexpected trailing bytes")
    return key
