"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), with Kafka's checks and
messages, so `kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'`
and its --describe work against kgroups as they do against Kafka."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode


def _store(ctx: RequestContext) -> Any:
    assert ctx.session is not None
    return ctx.session.security.scram


@handles(api_key=ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, min_version=0, max_version=0)
async def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
    result_cls = sibling(response_cls, "DescribeUserScramCredentialsResult")
    info_cls = sibling(response_cls, "CredentialInfo")
    users = _store(ctx).users()
    asked = None if request.users is None else [user.name for user in request.users]
    counts = Counter(asked or ())
    results = []
    for name in (sorted(users) if not asked else dict.fromkeys(asked)):
        error, message = ErrorCode.NONE, None
        if counts[name] > 1:
            error, message = (ErrorCode.DUPLICATE_RESOURCE,
                              "Cannot describe SCRAM credentials for the same user twice "
                              f"in a single request: {name}")
        elif name not in users:
            error, message = (ErrorCode.RESOURCE_NOT_FOUND,
                              f"Attempt to describe nonexistent SCRAM credentials for user {name}")
        infos = () if error != ErrorCode.NONE else tuple(
            build(info_cls, mechanism=MECHANISM_IDS[mechanism], iterations=credential.iterations)
            for mechanism, credential in sorted(users[name].items()))
        results.append(build(result_cls, user=name, error_code=kio_error(error),
                             error_message=message, credential_infos=infos))
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 error_message=None, results=tuple(results))


def _upsert_problem(upsertion: Any) -> tuple[ErrorCode, str] | None:
    mechanism = MECHANISM_NAMES.get(int(upsertion.mechanism))
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if int(upsertion.iterations) < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if int(upsertion.iterations) > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not upsertion.salt or not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


@handles(api_key=ApiKey.ALTER_USER_SCRAM_CREDENTIALS, min_version=0, max_version=0)
async def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    """Every change is checked first; the valid ones are stored together, in one write."""
    response_cls = response_type(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
    result_cls = sibling(response_cls, "AlterUserScramCredentialsResult")
    store = _store(ctx)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: Counter[tuple[str, int]] = Counter(
        (change.name, int(change.mechanism))
        for change in (*request.deletions, *request.upsertions))
    for change in (*request.deletions, *request.upsertions):
        if not change.name:
            errors.setdefault(change.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                            "Username must not be empty"))
        elif seen[(change.name, int(change.mechanism))] > 1:
            errors.setdefault(change.name, (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request"))
    for deletion in request.deletions:
        mechanism = MECHANISM_NAMES.get(int(deletion.mechanism))
        if mechanism is None:
            errors.setdefault(deletion.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                              "Unknown SCRAM mechanism"))
        elif store.get(deletion.name, mechanism) is None:
            errors.setdefault(deletion.name, (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist"))
    for upsertion in request.upsertions:
        problem = _upsert_problem(upsertion)
        if problem is not None:
            errors.setdefault(upsertion.name, problem)
    upserts: list[tuple[str, str, ScramCredential]] = [
        (u.name, MECHANISM_NAMES[int(u.mechanism)], credential_from_salted(
            MECHANISM_NAMES[int(u.mechanism)], bytes(u.salt), bytes(u.salted_password),
            int(u.iterations)))
        for u in request.upsertions if u.name not in errors]
    deletions = [(d.name, MECHANISM_NAMES[int(d.mechanism)])
                 for d in request.deletions if d.name not in errors]
    if upserts or deletions:
        store.apply(upserts, deletions)
    names = dict.fromkeys(change.name for change in (*request.deletions, *request.upsertions))
    results = tuple(
        build(result_cls, user=name,
              error_code=kio_error(errors[name][0] if name in errors else ErrorCode.NONE),
              error_message=errors[name][1] if name in errors else None)
        for name in names)
    return build(response_cls, throttle_time=NO_THROTTLE, results=results)


def install(registry: HandlerRegistry) -> None:
    for handler in (describe_user_scram_credentials, alter_user_scram_credentials):
        registry.register(handler)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

authz.rule(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)(authz.on_cluster(
    Operation.DESCRIBE, lambda ctx, _: authz.cluster_denied(ctx, results=())))
authz.rule(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)(authz.on_cluster(
    Operation.ALTER, lambda ctx, request: authz.response(ctx, results=tuple(
        authz.cluster_denied(ctx, "AlterUserScramCredentialsResult", user=user)
        for user in dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))))))
