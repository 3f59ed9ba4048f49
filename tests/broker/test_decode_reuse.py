"""A small frame that differs from one decoded lately only in its correlation id is answered
from that decoding (clients repeat the same Heartbeat and Metadata): it must come out as the
frame itself decodes, with its own correlation id, and nothing else may be taken for it."""

from __future__ import annotations

from tests.broker.broker_wire_helpers import request_of

from kgroups.broker import wire

HEARTBEAT = request_of(12, 4, group_id="g", generation_id=3, member_id="m",
                       group_instance_id=None)


def frame(correlation_id: int, request: object = HEARTBEAT, client_id: str = "c") -> bytes:
    return wire.encode_request(correlation_id, client_id, request)[4:]  # no size prefix


def test_a_repeated_request_decodes_with_its_own_correlation_id() -> None:
    first = wire.decode_request(frame(1))
    again = wire.decode_request(frame(2))
    assert again.body is first.body  # one decoding served both
    assert (again.correlation_id, again.client_id, again.api_key, again.api_version) == (
        2, "c", 12, 4)
    wire._DECODED.clear()
    assert wire.decode_request(frame(2)) == again


def test_anything_else_that_differs_is_decoded_afresh() -> None:
    first = wire.decode_request(frame(1))
    other_client = wire.decode_request(frame(1, client_id="d"))
    assert other_client.client_id == "d" and other_client.body == first.body
    other_member = wire.decode_request(frame(1, request_of(
        12, 4, group_id="g", generation_id=3, member_id="n", group_instance_id=None)))
    assert other_member.body.member_id == "n"
    longer = wire.decode_request(frame(1, request_of(
        12, 4, group_id="g" * 2000, generation_id=3, member_id="m", group_instance_id=None)))
    assert longer.body.group_id == "g" * 2000
    large = frame(1, longer.body)
    assert large[:4] + large[8:] not in wire._DECODED  # too large to keep


def test_the_kept_decodings_are_bounded() -> None:
    for index in range(wire._DECODED_ENTRIES + 10):
        wire.decode_request(frame(index, request_of(
            12, 4, group_id=f"g{index}", generation_id=3, member_id="m",
            group_instance_id=None)))
    assert len(wire._DECODED) <= wire._DECODED_ENTRIES
