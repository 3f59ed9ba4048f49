"""Wiring mistakes fail early: a misspelled response field in `wire.build`, a handler for an
API version Kafka does not define."""

from __future__ import annotations

import pytest

from kgroups.broker.apis.contract import (
    DuplicateHandlerError,
    FunctionHandler,
    HandlerRegistry,
    UnknownApiError,
)
from kgroups.broker.wire import UnknownFieldError, build, response_type, sibling


def test_a_field_only_newer_versions_have_is_dropped() -> None:
    heartbeat_v0 = response_type(12, 0)  # throttle_time_ms arrived in v1
    answer = build(heartbeat_v0, error_code=0, throttle_time=None)
    assert answer.error_code == 0


def test_a_field_no_version_has_is_refused() -> None:
    with pytest.raises(UnknownFieldError, match="errror_code"):
        build(response_type(12, 4), errror_code=0)


def test_nested_classes_are_checked_against_their_own_versions() -> None:
    member = sibling(response_type(11, 9), "JoinGroupResponseMember")
    built = build(member, member_id="m", group_instance_id=None, metadata=b"")
    assert built.member_id == "m"
    with pytest.raises(UnknownFieldError, match="member_idd"):
        build(sibling(response_type(11, 0), "JoinGroupResponseMember"), member_idd="m",
              metadata=b"")


async def _answer_nothing(ctx: object, request: object) -> None:
    return None


def test_a_handler_for_a_version_kafka_lacks_fails_at_registration() -> None:
    registry = HandlerRegistry()
    with pytest.raises(UnknownApiError, match=r"API key 3 v1[3-9] has no message schema"):
        registry.register(FunctionHandler(3, 0, 99, _answer_nothing))
    registry.register(FunctionHandler(3, 0, 12, _answer_nothing))
    with pytest.raises(DuplicateHandlerError):
        registry.register(FunctionHandler(3, 0, 1, _answer_nothing))
