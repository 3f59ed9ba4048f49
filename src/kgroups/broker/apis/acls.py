"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), as `kafka-acls` and AdminClient use
them. Without an authorizer (authorizer.class.name unset) they answer SECURITY_DISABLED, as
Kafka does; who may call them is decided in acl_enforcement.py (Describe/Alter on Cluster)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import (
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    binding_problem,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

DISABLED = "No Authorizer is configured."


def _authorizer(ctx: RequestContext) -> Authorizer | None:
    assert ctx.session is not None
    return ctx.session.security.authorizer


def _filter(entry: Any) -> AclFilter:
    return AclFilter(int(entry.resource_type_filter), entry.resource_name_filter,
                     int(getattr(entry, "pattern_type_filter", 3)), entry.principal_filter,
                     entry.host_filter, int(entry.operation), int(entry.permission_type))


@handles(api_key=ApiKey.DESCRIBE_ACLS, min_version=1, max_version=3)
async def describe_acls(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.DESCRIBE_ACLS, ctx.api_version)
    authorizer = _authorizer(ctx)
    acl_filter = _filter(request)
    problem = DISABLED if authorizer is None else acl_filter.problem()
    if authorizer is None or problem is not None:
        error = ErrorCode.SECURITY_DISABLED if authorizer is None else ErrorCode.INVALID_REQUEST
        return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(error),
                     error_message=problem, resources=())
    grouped: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for acl in authorizer.acls():
        if acl_filter.matches(acl):
            grouped[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(acl)
    resource_cls = sibling(response_cls, "DescribeAclsResource")
    description_cls = sibling(response_cls, "AclDescription")
    resources = tuple(
        build(resource_cls, resource_type=kind, resource_name=name, pattern_type=pattern,
              acls=tuple(build(description_cls, principal=acl.principal, host=acl.host,
                               operation=acl.operation, permission_type=acl.permission)
                         for acl in acls))
        for (kind, name, pattern), acls in grouped.items())
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 error_message=None, resources=resources)


@handles(api_key=ApiKey.CREATE_ACLS, min_version=1, max_version=3)
async def create_acls(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.CREATE_ACLS, ctx.api_version)
    result_cls = sibling(response_cls, "AclCreationResult")
    authorizer = _authorizer(ctx)
    results = []
    valid = []
    for creation in request.creations:
        binding = AclBinding(int(creation.resource_type), creation.resource_name,
                             int(getattr(creation, "resource_pattern_type", 3)),
                             creation.principal, creation.host, int(creation.operation),
                             int(creation.permission_type))
        message: str | None
        if authorizer is None:
            error, message = ErrorCode.SECURITY_DISABLED, DISABLED
        else:
            message = binding_problem(binding)
            error = ErrorCode.NONE if message is None else ErrorCode.INVALID_REQUEST
        if error == ErrorCode.NONE:
            valid.append(binding)
        results.append(build(result_cls, error_code=kio_error(error), error_message=message))
    if authorizer is not None and valid:
        authorizer.create(valid)
    return build(response_cls, throttle_time=NO_THROTTLE, results=tuple(results))


@handles(api_key=ApiKey.DELETE_ACLS, min_version=1, max_version=3)
async def delete_acls(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.DELETE_ACLS, ctx.api_version)
    result_cls = sibling(response_cls, "DeleteAclsFilterResult")
    matching_cls = sibling(response_cls, "DeleteAclsMatchingAcl")
    authorizer = _authorizer(ctx)
    filters = [_filter(entry) for entry in request.filters]
    if authorizer is None:
        return build(response_cls, throttle_time=NO_THROTTLE, filter_results=tuple(
            build(result_cls, error_code=kio_error(ErrorCode.SECURITY_DISABLED),
                  error_message=DISABLED, matching_acls=()) for _ in filters))
    problems = [f.problem() for f in filters]
    removed = authorizer.delete([f for f, p in zip(filters, problems, strict=True) if p is None])
    removed_iter = iter(removed)
    results = []
    for problem in problems:
        if problem is not None:
            results.append(build(result_cls, error_code=kio_error(ErrorCode.INVALID_REQUEST),
                                 error_message=problem, matching_acls=()))
            continue
        results.append(build(result_cls, error_code=kio_error(ErrorCode.NONE),
                             error_message=None, matching_acls=tuple(
            build(matching_cls, error_code=kio_error(ErrorCode.NONE), error_message=None,
                  resource_type=acl.resource_type, resource_name=acl.resource_name,
                  pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
                  operation=acl.operation, permission_type=acl.permission)
            for acl in next(removed_iter))))
    return build(response_cls, throttle_time=NO_THROTTLE, filter_results=tuple(results))


def install(registry: HandlerRegistry) -> None:
    for handler in (describe_acls, create_acls, delete_acls):
        registry.register(handler)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

authz.rule(ApiKey.DESCRIBE_ACLS)(authz.on_cluster(
    Operation.DESCRIBE, lambda ctx, _: authz.cluster_denied(ctx, resources=())))
authz.rule(ApiKey.CREATE_ACLS)(authz.on_cluster(
    Operation.ALTER, lambda ctx, request: authz.response(ctx, results=tuple(
        authz.cluster_denied(ctx, "AclCreationResult") for _ in request.creations))))
authz.rule(ApiKey.DELETE_ACLS)(authz.on_cluster(
    Operation.ALTER, lambda ctx, request: authz.response(ctx, filter_results=tuple(
        authz.cluster_denied(ctx, "DeleteAclsFilterResult", matching_acls=())
        for _ in request.filters))))
