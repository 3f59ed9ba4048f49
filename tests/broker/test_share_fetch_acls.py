"""ShareFetch and ShareAcknowledge behind Kafka's ACL rules: READ on the group or the whole
request fails; a topic without READ answers TOPIC_AUTHORIZATION_FAILED for its partitions
while the others are served."""

from __future__ import annotations

import asyncio
import dataclasses
import types
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.share.share_wire import brief, share_acknowledge, share_fetch

from kgroups.broker.apis import share_fetch as share_fetch_api
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import RequestContext
from kgroups.broker.security.acl_enforcement import AuthorizedHandler
from kgroups.broker.security.authorizer import (
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kgroups.errors import ErrorCode

ORDERS, SECRET = uuid.uuid4(), uuid.uuid4()


class _Topics:
    def partition_counts(self) -> dict[str, int]:
        return {"orders": 1, "secret": 1}

    def topic_id(self, name: str) -> uuid.UUID:
        return {"orders": ORDERS, "secret": SECRET}[name]


def _authorizer(tmp_path: Path) -> Authorizer:
    result = Authorizer(tmp_path / "acls.json", (), False)
    result.create([AclBinding(kind, name, PatternType.LITERAL, "User:alice", "*",
                              Operation.READ, Permission.ALLOW)
                   for kind, name in ((ResourceType.GROUP, "g"), (ResourceType.TOPIC, "orders"))])
    return result


def _call(tmp_path: Path, api_key: ApiKey, principal: str, request: Any,
          served: list[Any]) -> dict[str, Any]:
    """The rule in front of a handler that records what it was given and answers NONE."""

    async def inner(ctx: RequestContext, request: Any) -> Any:
        served.append(request)
        return share_fetch_api._error_response(ctx, ErrorCode.NONE)

    guarded = AuthorizedHandler(api_key, 1, 2, inner,  # type: ignore[arg-type]
                                _authorizer(tmp_path))
    ctx = RequestContext(api_key, 2, 1, "t", "127.0.0.1",
                         types.SimpleNamespace(topics=_Topics()),  # type: ignore[arg-type]
                         types.SimpleNamespace(principal=principal))  # type: ignore[arg-type]
    return brief(asyncio.run(guarded(ctx, request)))


def _fetch(topic_id: uuid.UUID) -> Any:
    return share_fetch("g", "m", 1, topic_id)


@pytest.mark.parametrize("api_key", [ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE])
def test_group_read_is_required(tmp_path: Path, api_key: ApiKey) -> None:
    served: list[Any] = []
    request = (_fetch(ORDERS) if api_key == ApiKey.SHARE_FETCH
               else share_acknowledge("g", "m", 1, ORDERS, {0: [(0, 0, [1])]}))
    answer = _call(tmp_path, api_key, "User:bob", request, served)
    assert answer["error"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert served == []


def test_topics_without_read_answer_topic_authorization_failed(tmp_path: Path) -> None:
    served: list[Any] = []
    request = _fetch(ORDERS)
    both = dataclasses.replace(request, topics=request.topics + _fetch(SECRET).topics)
    answer = _call(tmp_path, ApiKey.SHARE_FETCH, "User:alice", both, served)
    assert [t.topic_id for t in served[0].topics] == [ORDERS]
    assert answer["error"] == ErrorCode.NONE
    assert [(p["partition"], p["error"]) for p in answer["partitions"]] == [
        (0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
