"""Which __consumer_offsets partition owns a group: the same answer Kafka brokers give.

Clients never compute this themselves (they ask FindCoordinator), but a kgroups broker and a Kafka
broker reading the same log must agree on where each group's records live.
"""

from __future__ import annotations

from kgroups.assignors.java_hash import string_hash

_INT32_MIN = -(2**31)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: sum of UTF-16 code units times 31^(n-1-i), wrapped to int32."""
    value = string_hash(text)
    return value - (1 << 32) if value & 0x80000000 else value


def java_abs(value: int) -> int:
    """Kafka's Utils.abs: Math.abs, except that INT32_MIN maps to 0 instead of staying negative."""
    return 0 if value == _INT32_MIN else abs(value)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition holding `group_id`'s records."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return java_abs(java_string_hash(group_id)) % num_partitions
