"""The machinery that checks every served API as Kafka's KafkaApis checks it: the rule table,
the wrapped registry, and what the rules share (the principal's check, the denied answers).

With an authorizer configured, the broker's handlers are wrapped (`authorized_registry`): each
rule decides from the request and the connection's principal, answers what is denied itself,
hands the handler only what is allowed, and merges the two answers, so the handlers stay
unaware of ACLs and an unauthorized client learns nothing a Kafka broker would not tell it
(an unauthorized topic is TOPIC_AUTHORIZATION_FAILED whether or not it exists).

Each API family's rule sits beside its handler, in its module of `kgroups.broker.apis`, which
imports this one as `authz` (`@authz.rule(ApiKey.OFFSET_COMMIT)` in apis/groups.py): it is in
`RULES` once that module is imported, which registering its handler needs anyway. An API
without a rule is served to super users only: a handler added later is closed by default
rather than open.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import (
    ApiHandler,
    CloseConnection,
    HandlerRegistry,
    RequestContext,
)
from kgroups.broker.events import log_event
from kgroups.broker.security.authorizer import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    Authorizer,
    Operation,
    ResourceType,
)
from kgroups.broker.wire import NO_THROTTLE, build, has_field, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

logger = logging.getLogger("kgroups.authorizer")

GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
# Kafka's Errors.message() texts.
MESSAGES = {GROUP_DENIED: "Group authorization failed.",
            TOPIC_DENIED: "Topic authorization failed.",
            CLUSTER_DENIED: "Cluster authorization failed.",
            TXN_DENIED: "Transactional Id authorization failed."}
# Needed by nobody: the connection's own set-up.
UNCHECKED = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE})

Inner = Callable[[RequestContext, Any], Awaitable[Any]]


class Check:
    """One request's principal and host against the authorizer."""

    def __init__(self, ctx: RequestContext, authorizer: Authorizer) -> None:
        session = ctx.session
        assert session is not None
        self.principal = session.principal
        self.host = ctx.client_host
        self.authorizer = authorizer

    def __call__(self, operation: Operation, kind: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, operation, kind, name)

    def group(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.GROUP, name)

    def topic(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.TOPIC, name)

    def cluster(self, operation: Operation) -> bool:
        return self(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def operations(self, answered: int, kind: ResourceType, name: str | None) -> int:
        """An authorized_operations field narrowed to this principal: a handler answers every
        supported operation when the client asked, and Integer.MIN_VALUE (kept) when it did
        not or the resource is in error."""
        if answered == OPERATIONS_NOT_REQUESTED or name is None:
            return answered
        return self.authorizer.allowed_operations(self.principal, self.host, kind, name)

    def with_group_operations(self, group: Any) -> Any:
        """The group with its operations narrowed (unchanged in a version without them:
        DescribeGroups v0-v2)."""
        if not has_field(type(group), "authorized_operations"):
            return group
        return dataclasses.replace(group, authorized_operations=self.operations(
            int(group.authorized_operations), ResourceType.GROUP, group.group_id))

    def with_topic_operations(self, topic: Any) -> Any:
        """The topic with its operations narrowed (unchanged before Metadata v8), the entry
        itself when they stay (not asked for, the common case): an all-topics Metadata answer
        keeps its cached entries without a copy each."""
        if not has_field(type(topic), "topic_authorized_operations"):
            return topic
        answered = int(topic.topic_authorized_operations)
        narrowed = self.operations(answered, ResourceType.TOPIC, topic.name)
        if narrowed == answered:
            return topic
        return dataclasses.replace(topic, topic_authorized_operations=narrowed)


Rule = Callable[[RequestContext, Any, Inner, Check], Awaitable[Any]]
RULES: dict[ApiKey, Rule] = {}


def rule(*api_keys: ApiKey) -> Callable[[Rule], Rule]:
    """Decorator: the function is the authorization rule of these APIs."""

    def register(function: Rule) -> Rule:
        for key in api_keys:
            RULES[key] = function
        return function
    return register


def response(ctx: RequestContext, **fields: Any) -> Any:
    """The request's response class in its version, built from the denied answer's fields."""
    return build(response_type(ctx.api_key, ctx.api_version), throttle_time=NO_THROTTLE,
                 **fields)


def nested(ctx: RequestContext, class_name: str, /, **fields: Any) -> Any:
    """One entry of the response (a topic, a partition, a group) of the request's version."""
    return build(sibling(response_type(ctx.api_key, ctx.api_version), class_name), **fields)


def split(items: Any, allowed: Callable[[Any], bool]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The items allowed and the items denied, each in request order."""
    yes: list[Any] = []
    no: list[Any] = []
    for item in items:
        (yes if allowed(item) else no).append(item)
    return tuple(yes), tuple(no)


async def answer_allowed_topics(ctx: RequestContext, request: Any, inner: Inner,
                                allowed: Callable[[Any], bool],
                                results: Callable[[Any], Iterable[Any]],
                                ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The handler's entries for the request's allowed `topics` alone (`results` picks them
    from its response; it is not asked when none is allowed), and the denied topics, each in
    request order."""
    passed, denied = split(request.topics, allowed)
    if not passed:
        return (), denied
    return tuple(results(await inner(ctx, dataclasses.replace(request, topics=passed)))), denied


async def answers_by_group(ctx: RequestContext, inner: Inner, allowed: tuple[str, ...],
                           forward: Callable[[tuple[str, ...]], Any],
                           results: Callable[[Any], Iterable[Any]]) -> dict[str, Any]:
    """The handler's answer per group id for the allowed groups alone (`forward` makes the
    request naming them, `results` picks the entries of its response); nothing, without asking
    it, when none is allowed."""
    if not allowed:
        return {}
    return {entry.group_id: entry for entry in results(await inner(ctx, forward(allowed)))}


def denied_group(**fields: Any) -> dict[str, Any]:
    """The fields of a described group (Consumer/Share/StreamsGroupDescribe) its principal may
    not DESCRIBE; `fields` adds what the API's group has beside the common ones."""
    return {"error_code": kio_error(GROUP_DENIED), "error_message": MESSAGES[GROUP_DENIED],
            "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "members": (),
            "authorized_operations": OPERATIONS_NOT_REQUESTED, **fields}


def hidden_group(message: str, **fields: Any) -> dict[str, Any]:
    """The fields of a described group shown as TOPIC_AUTHORIZATION_FAILED because it uses a
    topic its principal may not DESCRIBE (the topic's name would tell what it may not know)."""
    return {**denied_group(**fields), "error_code": kio_error(TOPIC_DENIED),
            "error_message": message, "group_epoch": 0, "assignment_epoch": 0}


async def described_groups(ctx: RequestContext, request: Any, inner: Inner, check: Check,
                           denied: dict[str, Any],
                           shown: Callable[[Any], Any] | None = None) -> Any:
    """A Consumer/Share/StreamsGroupDescribe answer under DESCRIBE on each group: the groups
    the principal may not describe answered `denied`, the others as the handler answers them,
    each passed through `shown` (by default narrowed to the principal's operations)."""
    names = tuple(request.group_ids)
    allowed, _ = split(names, lambda name: check.group(Operation.DESCRIBE, name))
    answered = await answers_by_group(
        ctx, inner, allowed, lambda ids: dataclasses.replace(request, group_ids=ids),
        lambda answer: answer.groups)
    keep = shown or check.with_group_operations
    return response(ctx, groups=tuple(
        keep(answered[name]) if name in answered
        else nested(ctx, "DescribedGroup", group_id=name, **denied) for name in names))


def on_cluster(operation: Operation, denied: Callable[[RequestContext, Any], Any]) -> Rule:
    """The rule of an API Kafka checks on the cluster alone: `operation` on the cluster lets
    the request through, else `denied(ctx, request)` answers it."""

    async def cluster_rule(ctx: RequestContext, request: Any, inner: Inner, check: Check) -> Any:
        if check.cluster(operation):
            return await inner(ctx, request)
        return denied(ctx, request)

    return cluster_rule


def cluster_denied(ctx: RequestContext, class_name: str | None = None, /, **fields: Any) -> Any:
    """CLUSTER_AUTHORIZATION_FAILED with its text: the response itself, or one entry of it
    (`class_name`) where the error goes per entry."""
    denied = {"error_code": kio_error(CLUSTER_DENIED), "error_message": MESSAGES[CLUSTER_DENIED]}
    if class_name is None:
        return response(ctx, **denied, **fields)
    return nested(ctx, class_name, **denied, **fields)


def partition_entries(ctx: RequestContext, cls: str, topic: Any, error: ErrorCode,
                      /, **extra: Any) -> tuple[Any, ...]:
    """A denied topic's partitions, each answering `error`, whichever way the request names
    them (indexes, or partition entries with `partition_index` or `index`)."""
    indexes = getattr(topic, "partition_indexes", None)
    if indexes is None:
        indexes = [getattr(p, "partition_index", getattr(p, "index", None))
                   for p in topic.partitions]
    return tuple(nested(ctx, cls, partition_index=index, error_code=kio_error(error),
                        **extra) for index in indexes)


@dataclass(frozen=True, slots=True)
class AuthorizedHandler:
    """A handler behind its API's rule (or, without a rule, behind super.users)."""

    api_key: ApiKey
    min_version: int
    max_version: int
    inner: ApiHandler
    authorizer: Authorizer

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        check = Check(ctx, self.authorizer)
        api_rule = RULES.get(self.api_key)
        if api_rule is not None:
            return await api_rule(ctx, request, self.inner, check)
        if check.principal in self.authorizer.super_users:
            return await self.inner(ctx, request)
        log_event(logger, logging.WARNING, "unauthorized_api", api_key=self.api_key,
                  principal=check.principal, reason="no_authorization_rule")
        raise CloseConnection("api_without_authorization_rule")


def authorized_registry(registry: HandlerRegistry, authorizer: Authorizer) -> HandlerRegistry:
    """The same APIs, each behind its authorization rule."""
    guarded = HandlerRegistry()
    for handler in registry:
        if handler.api_key in UNCHECKED:
            guarded.register(handler)
        else:
            guarded.register(AuthorizedHandler(handler.api_key, handler.min_version,
                                               handler.max_version, handler, authorizer))
    return guarded
