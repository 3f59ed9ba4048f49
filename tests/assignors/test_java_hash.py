"""Java's and Kafka's hash orders as the JVM showed them (Java 17, kafka-server-common 4.3.1's
TimelineHashMap): the server-side assignors give Kafka's answers only while these hold, and
these run without a JVM."""

from __future__ import annotations

import base64
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.assignors.java_hash import (
    copied_set_order,
    hash_set_order,
    string_hash,
    timeline_capacity,
    timeline_order,
    uuid_hash,
)


def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


def test_hash_codes_are_javas() -> None:
    assert _signed(string_hash("héllo✓")) == -1099020539
    assert uuid_hash(uuid.UUID(int=(1 << 64) | 5)) == 4  # new Uuid(1, 5)
    kafka_id = uuid.UUID(bytes=base64.urlsafe_b64decode("C2ZAKADgPSzzyVeJrOGpVA=="))
    assert uuid_hash(kafka_id) == 1420723161


@settings(max_examples=300)
@given(st.text(max_size=40) | st.text(min_size=1020, max_size=1100))
def test_string_hash_is_the_definition_at_every_length(text: str) -> None:
    """The sum over a table of powers (strings up to 1,024 UTF-16 units) and the loop past it
    both give sum(unit[i] * 31 ** (n - 1 - i)) mod 2 ** 32, surrogate pairs counted as two
    units, as Java counts them."""
    raw = text.encode("utf-16-be")
    units = [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]
    expected = sum(unit * 31 ** (len(units) - 1 - i) for i, unit in enumerate(units)) % (1 << 32)
    string_hash.cache_clear()
    assert string_hash(text) == expected


def test_hash_set_and_map_orders_are_javas() -> None:
    # new HashSet<>(List.of(40, 8, 3, 24, 17)): one bucket holds 40, 8 and 24, in put order.
    assert copied_set_order([40, 8, 3, 24, 17], lambda p: p) == [17, 3, 40, 8, 24]
    puts = ["member-000003", "zeta", "m-1", "Alpha", "member-000010"]
    assert hash_set_order(puts, string_hash) == [
        "zeta", "m-1", "Alpha", "member-000003", "member-000010"]


def test_timeline_order_is_kafkas_after_joins_updates_and_a_leave() -> None:
    """Five ids in one slot: put a..e, put a again (the table grows on that put), remove c."""
    ids = [f"{n}-test_several_members_get_the_parti" for n in "abde"]
    order = timeline_order(ids, string_hash, timeline_capacity(5))
    assert [i[0] for i in order] == ["e", "b", "a", "d"]
    # Before the fifth member, four in a table of four slots: last put first in the slot.
    four = [f"{n}-test_several_members_get_the_parti" for n in "abcd"]
    assert [i[0] for i in timeline_order(four, string_hash, timeline_capacity(4))] == [
        "c", "b", "d", "a"]
