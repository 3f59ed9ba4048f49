"""The transaction coordinator's APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions, answered from the broker's
TransactionRuntime (kgroups.broker.transaction_runtime) with Kafka 4.3.1's versions and errors,
and who may call them beside them.

Each handler turns the request into one call of the sans-IO coordinator, lets the runtime make
its record durable, and answers; a broker that is not the id's coordinator (in a cluster,
another broker leads its __transaction_state partition) answers NOT_COORDINATOR, and one still
replaying that partition COORDINATOR_LOAD_IN_PROGRESS, as Kafka's do.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation, ResourceType
from kgroups.broker.transaction_runtime import wall_clock_ms
from kgroups.broker.wire import NO_THROTTLE, build, kio_error, response_type, sibling
from kgroups.errors import ErrorCode
from kgroups.transactions.coordinator import TRANSACTION_VERSION_2
from kgroups.transactions.messages import Decision

NO_PRODUCER_ID = -1
# EndTxn v5 is the first a transaction version 2 client (KIP-890 part 2) sends.
END_TXN_TV2_VERSION = 5
# AddPartitionsToTxn v4+: batched, sent by brokers (KIP-890), with verify_only.
ADD_PARTITIONS_BATCHED_VERSION = 4


# The first version of each API that may answer PRODUCER_FENCED (KIP-588); older clients are
# told INVALID_PRODUCER_EPOCH instead, as Kafka does.
PRODUCER_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                         ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2}


def _for_version(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_SINCE[ctx.api_key]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _not_served(ctx: RequestContext, transactional_id: str) -> ErrorCode | None:
    """Why this broker does not answer for the id now (TransactionRuntime.refusal), else None."""
    return ctx.broker.transactions.refusal(transactional_id)


def _millis(value: Any) -> int:
    """A kio timedelta field (transaction timeouts) in milliseconds."""
    return round(value.total_seconds() * 1000)


async def init_transactional(ctx: RequestContext, request: Any) -> Any:
    """InitProducerId with a transactional id (apis/cluster.py answers the idempotent kind)."""
    response_cls = response_type(ApiKey.INIT_PRODUCER_ID, ctx.api_version)

    def answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
        return build(response_cls, throttle_time=NO_THROTTLE,
                     error_code=kio_error(_for_version(ctx, error)),
                     producer_id=producer_id, producer_epoch=epoch)

    expected_id = int(getattr(request, "producer_id", NO_PRODUCER_ID))
    expected_epoch = int(getattr(request, "producer_epoch", -1))
    if (expected_id == NO_PRODUCER_ID) != (expected_epoch == -1):
        return answer(ErrorCode.INVALID_REQUEST)
    runtime = ctx.broker.transactions
    try:
        runtime.ensure_topic()
        refused = runtime.refusal(request.transactional_id)
        if refused is not None:
            return answer(refused)
        decision = runtime.coordinator.init_producer_id(
            request.transactional_id, _millis(request.transaction_timeout), wall_clock_ms(),
            expected_id, expected_epoch)
    except OSError:  # __transaction_state could not be created, or no producer id block
        return answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    decision = await runtime.run(decision)
    if decision.error is not ErrorCode.NONE:
        return answer(decision.error)
    return answer(ErrorCode.NONE, decision.producer_id, decision.producer_epoch)


@handles(api_key=ApiKey.ADD_PARTITIONS_TO_TXN, min_version=0, max_version=5)
async def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.api_version)
    if ctx.api_version < ADD_PARTITIONS_BATCHED_VERSION:
        results = await _add_one(ctx, request.v3_and_below_transactional_id,
                                 request.v3_and_below_producer_id,
                                 request.v3_and_below_producer_epoch,
                                 request.v3_and_below_topics, verify_only=False)
        return build(response_cls, throttle_time=NO_THROTTLE,
                     results_by_topic_v3_and_below=results)
    result_cls = sibling(response_cls, "AddPartitionsToTxnResult")
    answered = []
    for txn in request.transactions:
        results = await _add_one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                 txn.topics, verify_only=bool(txn.verify_only))
        answered.append(build(result_cls, transactional_id=txn.transactional_id,
                              topic_results=results))
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 results_by_transaction=tuple(answered))


async def _add_one(ctx: RequestContext, transactional_id: str, producer_id: int, epoch: int,
                   topics: Any, verify_only: bool) -> tuple[Any, ...]:
    """One transaction's partitions, each with its error (Kafka gives every partition the
    same one, but for unknown partitions: UNKNOWN_TOPIC_OR_PARTITION, the rest not tried)."""
    wanted = [(topic.name, int(p)) for topic in topics for p in topic.partitions]
    unknown = {(t, p) for t, p in wanted
               if p >= (ctx.broker.topics.partition_count(t) or 0) or p < 0}
    errors: dict[tuple[str, int], ErrorCode]
    refused = _not_served(ctx, transactional_id)
    if refused is not None:
        errors = dict.fromkeys(wanted, refused)
    elif unknown:
        errors = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                  else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}
    elif verify_only:
        errors = ctx.broker.transactions.coordinator.verify_partitions(
            transactional_id, int(producer_id), int(epoch), wanted)
    else:
        runtime = ctx.broker.transactions
        decision = await runtime.run(runtime.coordinator.add_partitions(
            transactional_id, int(producer_id), int(epoch), wanted, wall_clock_ms()))
        errors = dict.fromkeys(wanted, decision.error)
    return _topic_results(ctx, {tp: _for_version(ctx, e) for tp, e in errors.items()})


def _topic_results(ctx: RequestContext, errors: dict[tuple[str, int], ErrorCode]
                   ) -> tuple[Any, ...]:
    response_cls = response_type(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.api_version)
    topic_cls = sibling(response_cls, "AddPartitionsToTxnTopicResult")
    partition_cls = sibling(response_cls, "AddPartitionsToTxnPartitionResult")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(build(
            partition_cls, partition_index=partition, partition_error_code=kio_error(error)))
    return tuple(build(topic_cls, name=topic, results_by_partition=tuple(results))
                 for topic, results in by_topic.items())


@handles(api_key=ApiKey.ADD_OFFSETS_TO_TXN, min_version=0, max_version=4)
async def add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.ADD_OFFSETS_TO_TXN, ctx.api_version)
    refused = _not_served(ctx, request.transactional_id)
    if refused is not None:
        return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(refused))
    runtime = ctx.broker.transactions
    decision = await runtime.run(runtime.coordinator.add_offsets(
        request.transactional_id, int(request.producer_id), int(request.producer_epoch),
        request.group_id, wall_clock_ms()))
    return build(response_cls, throttle_time=NO_THROTTLE,
                 error_code=kio_error(_for_version(ctx, decision.error)))


@handles(api_key=ApiKey.END_TXN, min_version=0, max_version=5)
async def end_txn(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.END_TXN, ctx.api_version)
    refused = _not_served(ctx, request.transactional_id)
    decision = Decision(refused) if refused is not None else Decision(ErrorCode.NONE)
    if refused is None:
        runtime = ctx.broker.transactions
        version = TRANSACTION_VERSION_2 if ctx.api_version >= END_TXN_TV2_VERSION else 0
        decision = await runtime.run(runtime.coordinator.end_transaction(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch),
            bool(request.committed), wall_clock_ms(), version))
    return build(response_cls, throttle_time=NO_THROTTLE,
                 error_code=kio_error(_for_version(ctx, decision.error)),
                 producer_id=decision.producer_id, producer_epoch=decision.producer_epoch)


@handles(api_key=ApiKey.DESCRIBE_TRANSACTIONS, min_version=0, max_version=0)
async def describe_transactions(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.DESCRIBE_TRANSACTIONS, ctx.api_version)
    state_cls = sibling(response_cls, "TransactionState")
    topic_cls = sibling(response_cls, "TopicData")
    states = []
    for transactional_id in request.transactional_ids:
        refused = _not_served(ctx, transactional_id)
        described = (None if refused is not None
                     else ctx.broker.transactions.coordinator.describe(transactional_id))
        error = refused or (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND if described is None
                            else ErrorCode.NONE)
        topics: dict[str, list[int]] = {}
        for topic, partition in (described.partitions if described is not None else ()):
            topics.setdefault(topic, []).append(partition)
        # Kafka leaves every field of an id it does not know at its schema default (zero).
        states.append(build(
            state_cls, error_code=kio_error(error), transactional_id=transactional_id,
            transaction_state=described.state if described is not None else "",
            transaction_timeout=timedelta(milliseconds=described.timeout_ms if described else 0),
            transaction_start_time=datetime.fromtimestamp(
                (described.start_timestamp_ms if described else 0) / 1000, tz=UTC),
            producer_id=described.producer_id if described else 0,
            producer_epoch=described.producer_epoch if described else 0,
            topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps))
                         for t, ps in topics.items())))
    return build(response_cls, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


@handles(api_key=ApiKey.LIST_TRANSACTIONS, min_version=0, max_version=2)
async def list_transactions(ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(ApiKey.LIST_TRANSACTIONS, ctx.api_version)
    state_cls = sibling(response_cls, "TransactionState")
    refused = ctx.broker.transactions.listing_refusal()
    if refused is not None:
        return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(refused),
                     unknown_state_filters=(), transaction_states=())
    found, unknown = ctx.broker.transactions.coordinator.list_transactions(
        states=request.state_filters, producer_ids=[int(p) for p in request.producer_id_filters],
        now_ms=wall_clock_ms(), duration_ms=int(getattr(request, "duration_filter", -1)),
        id_pattern=getattr(request, "transactional_id_pattern", None))
    return build(response_cls, throttle_time=NO_THROTTLE, error_code=kio_error(ErrorCode.NONE),
                 unknown_state_filters=tuple(unknown),
                 transaction_states=tuple(
                     build(state_cls, transactional_id=txn.transactional_id,
                           producer_id=txn.producer_id,
                           transaction_state=txn.state.display_name)
                     for txn in sorted(found, key=lambda t: t.transactional_id)))


def install(registry: HandlerRegistry) -> None:
    for handler in (add_partitions_to_txn, add_offsets_to_txn, end_txn, describe_transactions,
                    list_transactions):
        registry.register(handler)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

@authz.rule(ApiKey.ADD_PARTITIONS_TO_TXN)
async def _authorize_add_partitions(ctx: RequestContext, request: Any, inner: authz.Inner,
                                    check: authz.Check) -> Any:
    """v4+ comes from brokers: ClusterAction. v0-v3: TransactionalId Write, then Topic Write
    for each topic (a denied topic fails, the others are not attempted)."""
    if ctx.api_version >= ADD_PARTITIONS_BATCHED_VERSION:
        if check.cluster(Operation.CLUSTER_ACTION):
            return await inner(ctx, request)
        return authz.response(ctx, error_code=kio_error(authz.CLUSTER_DENIED),
                              results_by_transaction=())
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    if not check(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                 request.v3_and_below_transactional_id):
        errors = dict.fromkeys(wanted, authz.TXN_DENIED)
    else:
        denied = {t for t, _ in wanted if not check.topic(Operation.WRITE, t)}
        if not denied:
            return await inner(ctx, request)
        errors = {(t, p): authz.TOPIC_DENIED if t in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
                  for t, p in wanted}
    return authz.response(ctx, results_by_topic_v3_and_below=_topic_results(ctx, errors))


@authz.rule(ApiKey.ADD_OFFSETS_TO_TXN)
async def _authorize_add_offsets(ctx: RequestContext, request: Any, inner: authz.Inner,
                                 check: authz.Check) -> Any:
    if not check(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return authz.response(ctx, error_code=kio_error(authz.TXN_DENIED))
    if not check.group(Operation.READ, request.group_id):
        return authz.response(ctx, error_code=kio_error(authz.GROUP_DENIED))
    return await inner(ctx, request)


@authz.rule(ApiKey.END_TXN)
async def _authorize_end_txn(ctx: RequestContext, request: Any, inner: authz.Inner,
                             check: authz.Check) -> Any:
    if check(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return await inner(ctx, request)
    return authz.response(ctx, error_code=kio_error(authz.TXN_DENIED), producer_id=-1,
                          producer_epoch=-1)


@authz.rule(ApiKey.DESCRIBE_TRANSACTIONS)
async def _authorize_describe_transactions(ctx: RequestContext, request: Any,
                                           inner: authz.Inner, check: authz.Check) -> Any:
    """Ids the principal may not Describe answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    response = await inner(ctx, request)
    return dataclasses.replace(response, transaction_states=tuple(
        state if check(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                       state.transactional_id)
        else dataclasses.replace(state, error_code=kio_error(authz.TXN_DENIED),
                                 transaction_state="", producer_id=-1, producer_epoch=-1,
                                 topics=())
        for state in response.transaction_states))


@authz.rule(ApiKey.LIST_TRANSACTIONS)
async def _authorize_list_transactions(ctx: RequestContext, request: Any, inner: authz.Inner,
                                       check: authz.Check) -> Any:
    """Only the ids the principal may Describe are listed."""
    response = await inner(ctx, request)
    return dataclasses.replace(response, transaction_states=tuple(
        state for state in response.transaction_states
        if check(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, state.transactional_id)))
