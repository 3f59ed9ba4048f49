"""SaslHandshake (17) and SaslAuthenticate (36): PLAIN and SCRAM-SHA-256/512 as Kafka serves them.

Before a SASL connection has authenticated the server lets nothing but ApiVersions and these
two through, in Kafka's order (request_intake.py): a request out of it closes the connection,
after a handshake with the request's error response (ILLEGAL_SASL_STATE), as Kafka does. A
handshake names the mechanism; SaslAuthenticate carries its tokens (one for PLAIN, two for
SCRAM). Any failure answers the error, as Kafka words it, after
connection.failed.authentication.delay.ms, and the connection then closes (Session.failure),
so one connection gets one attempt and a guesser one attempt per delay.
"""

from __future__ import annotations

import asyncio
import datetime
import hmac
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security.authorizer import OPERATIONS_NOT_REQUESTED
from kgroups.broker.security.scram import ScramExchange, ScramFailure
from kgroups.broker.security.state import Session
from kgroups.broker.wire import build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode

NO_LIFETIME = datetime.timedelta(0)
_AFTER_AUTH = "SaslAuthenticate request received after successful authentication"


def _session(ctx: RequestContext) -> Session:
    session = ctx.session
    assert session is not None, "the server gives every request its connection's session"
    return session


@handles(api_key=ApiKey.SASL_HANDSHAKE, min_version=0, max_version=1)
async def sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    session = _session(ctx)
    response_cls = response_type(ApiKey.SASL_HANDSHAKE, ctx.api_version)
    mechanisms = session.mechanisms
    if session.authenticated:
        # Kafka's answer once authenticated, or on a listener without SASL; the connection stays.
        return build(response_cls, error_code=kio_error(ErrorCode.ILLEGAL_SASL_STATE),
                     mechanisms=mechanisms)
    if request.mechanism not in mechanisms:
        session.failure = {"reason": "unsupported_sasl_mechanism",
                           "mechanism": request.mechanism[:64]}
        return build(response_cls, error_code=kio_error(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                     mechanisms=mechanisms)
    session.mechanism = request.mechanism
    session.raw_tokens = ctx.api_version == 0
    if request.mechanism.startswith("SCRAM-"):
        session.scram = ScramExchange(request.mechanism, session.security.scram)
    return build(response_cls, error_code=kio_error(ErrorCode.NONE), mechanisms=mechanisms)


def _check_plain(session: Session, token: bytes) -> tuple[str | None, str | None]:
    """(user, None) when the PLAIN token authenticates, else (user or None, Kafka's message)."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        return None, f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        return None, "Invalid SASL/PLAIN response: not UTF-8"
    if not user:
        return None, "Authentication failed: username not specified"
    if not password:
        return user, "Authentication failed: password not specified"
    expected = session.security.plain_users.get(session.listener.name, {}).get(user)
    if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
        return user, "Authentication failed: Invalid username or password"
    if authzid and authzid != user:
        return user, ("Authentication failed: Client requested an authorization id that is "
                      "different from username")
    return user, None


async def authenticate(session: Session, token: bytes) -> tuple[ErrorCode, str | None, bytes]:
    """One SASL token in: the error (NONE while the exchange goes on or once it succeeded),
    Kafka's message for a failure, and the token to send back."""
    mechanism = session.mechanism
    assert mechanism is not None
    user: str | None
    reply = b""
    if mechanism == "PLAIN":
        user, message = _check_plain(session, token)
    else:
        exchange = session.scram
        assert exchange is not None
        try:
            reply = exchange.step(token)
            message = None
        except ScramFailure as exc:
            session.failure = {"detail": str(exc)}
            message = ("Authentication failed during authentication due to invalid "
                       f"credentials with SASL mechanism {mechanism}")
        user = exchange.user
        if message is None and not exchange.complete:
            return ErrorCode.NONE, None, reply
    if message is not None:
        session.failure = {"reason": "sasl_authentication_failed", "mechanism": mechanism,
                           "user": (user or "")[:256], **(session.failure or {})}
        await asyncio.sleep(session.security.failed_auth_delay_s)
        return ErrorCode.SASL_AUTHENTICATION_FAILED, message, b""
    session.principal = f"User:{user}"
    session.authenticated = True
    session.raw_tokens = False
    return ErrorCode.NONE, None, reply


async def raw_token(session: Session, token: bytes) -> bytes | None:
    """After a v0 SaslHandshake the tokens come bare, each in a size-prefixed frame (the
    protocol before SaslAuthenticate, still used by older librdkafka); a failure closes the
    connection without an answer."""
    error, _message, reply = await authenticate(session, token)
    return None if error != ErrorCode.NONE else reply


@handles(api_key=ApiKey.SASL_AUTHENTICATE, min_version=0, max_version=2)
async def sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    session = _session(ctx)
    response_cls = response_type(ApiKey.SASL_AUTHENTICATE, ctx.api_version)

    def answer(error: ErrorCode, message: str | None, token: bytes = b"") -> Any:
        return build(response_cls, error_code=kio_error(error), error_message=message,
                     auth_bytes=token, session_lifetime=NO_LIFETIME)

    if session.authenticated:
        return answer(ErrorCode.ILLEGAL_SASL_STATE, _AFTER_AUTH)
    assert session.mechanism is not None, "request_intake closes before a handshake"
    return answer(*await authenticate(session, bytes(request.auth_bytes)))


def out_of_sequence(session: Session, api_key: int, api_version: int, request: Any) -> Any:
    """The answer to a request other than SaslAuthenticate after a SaslHandshake (v1) and
    before authentication: Kafka answers the request's error response with
    ILLEGAL_SASL_STATE, then closes (Session.failure). Only the requests a client sends
    while it logs in have one here (ApiVersions, SaslHandshake again, Metadata); any other is
    None: the connection closes without an answer."""
    session.failure = {"reason": "unexpected_request_during_sasl", "api_key": str(api_key)}
    error = kio_error(ErrorCode.ILLEGAL_SASL_STATE)
    response_cls = response_type(api_key, api_version)
    if api_key == ApiKey.API_VERSIONS:
        return build(response_cls, error_code=error, api_keys=(), throttle_time=NO_LIFETIME,
                     supported_features=(), finalized_features_epoch=-1,
                     finalized_features=(), zk_migration_ready=False)
    if api_key == ApiKey.SASL_HANDSHAKE:
        return build(response_cls, error_code=error, mechanisms=())
    if api_key == ApiKey.METADATA:
        topic_cls = sibling(response_cls, "MetadataResponseTopic")
        return build(response_cls, throttle_time=NO_LIFETIME, brokers=(), cluster_id=None,
                     controller_id=-1, cluster_authorized_operations=OPERATIONS_NOT_REQUESTED,
                     topics=tuple(build(
                         topic_cls, error_code=error, name=topic.name,
                         topic_id=getattr(topic, "topic_id", None), is_internal=False,
                         partitions=(), topic_authorized_operations=OPERATIONS_NOT_REQUESTED)
                         for topic in request.topics or ()))
    return None


def install(registry: HandlerRegistry) -> None:
    for handler in (sasl_handshake, sasl_authenticate):
        registry.register(handler)
