"""What one request frame becomes: the checks every frame passes, then the work that answers it.

Shared by the two places a frame can arrive: a client socket served in the broker's own process
(`local_connection.LocalConnection`) and a frame relayed from the network process
(`front_link`). Both must refuse the same frames for the same reasons and run handlers the same
way, so the rules live here once: a frame too short for a header, an API the connection may not
use before it has authenticated (after a SASL handshake, answered with its error response first,
as Kafka does), an unknown API key or version (ApiVersions excepted: it is answered at v0 with
the supported list, as Kafka does), a body that does not decode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.static.primitive import i16

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import CloseConnection, RequestContext
from kgroups.broker.events import log_event
from kgroups.broker.net.connection import Refusal
from kgroups.broker.security import sasl
from kgroups.broker.security.state import PRE_AUTH_API_KEYS
from kgroups.broker.wire import (
    DecodedRequest,
    FrameDecodeError,
    decode_request,
    encode_response,
    kio_error,
    peek_header,
)
from kgroups.errors import ErrorCode

if TYPE_CHECKING:
    from kgroups.broker.apis.contract import HandlerServices
    from kgroups.broker.security.state import Session

logger = logging.getLogger("kgroups.server")

SIZE_PREFIX_BYTES = 4

Answer = Coroutine[Any, Any, bytes | None]
# Runs a decoded request's handler and encodes its answer (None: nothing to send).
Dispatch = Callable[[Any, RequestContext, Any], Answer]
# The APIs whose handlers answer in their first step unless something makes them wait (their
# group's turn, room in the memory budget, a record to write): a socket served in the broker
# process runs that step as it reads the frame, without a task (`first_step`). None of them
# needs a task of its own (asyncio.timeout, Fetch's, would cancel the reader's).
ANSWERED_AT_ONCE = frozenset({
    ApiKey.HEARTBEAT, ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.METADATA, ApiKey.OFFSET_FETCH,
    ApiKey.FIND_COORDINATOR, ApiKey.API_VERSIONS,
})


def request_work(broker: HandlerServices, session: Session, client_host: str, peer: str,
                 frame: bytes | memoryview, dispatch: Dispatch) -> tuple[Answer, bool]:
    """The coroutine that answers `frame` and whether its API is one ANSWERED_AT_ONCE, or
    Refusal when the frame must close the connection."""
    if session.raw_tokens:
        return _raw_sasl_token(session, bytes(frame)), False
    try:
        api_key, api_version, correlation_id = peek_header(frame)
    except FrameDecodeError:
        raise Refusal("frame_too_short", size=len(frame)) from None
    if not session.authenticated:
        _check_sasl_sequence(session, api_key)
    registry = broker.registry
    handler = registry.get(api_key)
    if handler is None:
        raise Refusal("unknown_api_key", api_key=api_key, version=api_version)
    if not registry.supports(api_key, api_version):
        if api_key != ApiKey.API_VERSIONS:
            raise Refusal("unsupported_version", api_key=api_key, version=api_version)
        # Kafka answers an ApiVersions it cannot parse with v0 + the supported list, so a
        # newer client can retry with a version both sides know.
        log_event(logger, logging.INFO, "api_versions_fallback", peer=peer, version=api_version)
        return _unsupported_api_versions(broker, correlation_id), False
    try:
        request = decode_request(frame)
    except FrameDecodeError as exc:
        raise Refusal("malformed_request", api_key=api_key, version=api_version,
                      error=exc) from None
    if request.unused_bytes:
        log_event(logger, logging.DEBUG, "request_trailing_bytes", peer=peer, api_key=api_key,
                  version=api_version, unused=request.unused_bytes)
    if (not session.authenticated and session.mechanism is not None
            and api_key != ApiKey.SASL_AUTHENTICATE):
        return _out_of_sequence(session, request), False
    ctx = RequestContext(handler.api_key, api_version, correlation_id, request.client_id,
                         client_host, broker, session)
    return dispatch(handler, ctx, request.body), api_key in ANSWERED_AT_ONCE


def _check_sasl_sequence(session: Session, api_key: int) -> None:
    """Before authentication Kafka takes ApiVersions and SaslHandshake, then (after the
    handshake) SaslAuthenticate: anything else before the handshake, SaslAuthenticate
    included, closes the connection without an answer."""
    if api_key not in PRE_AUTH_API_KEYS:
        if session.mechanism is None:
            raise Refusal("unauthenticated_request", api_key=api_key,
                          listener=session.listener.name)
    elif api_key == ApiKey.SASL_AUTHENTICATE and session.mechanism is None:
        raise Refusal("sasl_authenticate_before_handshake", listener=session.listener.name)


async def _out_of_sequence(session: Session, request: DecodedRequest) -> bytes:
    """After the handshake only SaslAuthenticate is expected: the request's error response,
    then the connection closes; without one, it closes at once."""
    response = sasl.out_of_sequence(session, request.api_key, request.api_version, request.body)
    if response is None:
        raise CloseConnection("unexpected_request_during_sasl")
    return encode_response(request.correlation_id, response)


def framed(ctx: RequestContext, response: Any) -> bytes | None:
    """A handler's answer, framed (None: the request gets none). Not a coroutine around the
    handler: every request would resume one more frame."""
    return None if response is None else encode_response(ctx.correlation_id, response)


async def _raw_sasl_token(session: Session, token: bytes) -> bytes | None:
    reply = await sasl.raw_token(session, token)
    return None if reply is None else len(reply).to_bytes(SIZE_PREFIX_BYTES, "big") + reply


async def _unsupported_api_versions(broker: HandlerServices, correlation_id: int) -> bytes:
    response = ApiVersionsResponse(
        error_code=kio_error(ErrorCode.UNSUPPORTED_VERSION),
        api_keys=tuple(
            ApiVersion(api_key=i16(h.api_key), min_version=i16(h.min_version),
                       max_version=i16(h.max_version))
            for h in broker.registry
        ),
    )
    return encode_response(correlation_id, response)


Close = tuple[int, str, dict[str, Any]]  # the close's log level, reason and fields


def failed_request(error: BaseException, peer: str) -> Close:
    """Why a request that raised closes its connection: a handler's CloseConnection (an acks=0
    produce that failed), or an exception no error code maps, which Kafka also answers by
    closing; the latter's traceback is logged."""
    if isinstance(error, CloseConnection):
        return logging.INFO, error.reason, {}
    logger.error("handler failed peer=%s", peer, exc_info=error)
    return logging.ERROR, "handler_failed", {"error": repr(error)}


def failed_session(session: Session) -> Close | None:
    """After an answer: the connection closes when its authentication failed (the answer,
    delayed by connection.failed.authentication.delay.ms, went first, as Kafka does)."""
    if session.failure is None:
        return None
    fields: dict[str, Any] = dict(session.failure)
    reason = fields.pop("reason", "authentication_failed")
    return logging.WARNING, reason, {"listener": session.listener.name, **fields}
