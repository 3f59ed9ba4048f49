"""Who may call the transaction APIs (the rules beside their handlers in
kgroups.broker.apis.transactions), with a principal allowed exactly what each case names."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.broker.broker_wire_helpers import nested_of, request_of

from kgroups.broker.apis import transactions
from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import RequestContext
from kgroups.broker.security.authorizer import Operation, ResourceType
from kgroups.broker.wire import build, response_type, sibling
from kgroups.errors import ErrorCode

Grant = tuple[ResourceType, str, Operation]


class Allowed:
    """A Check that allows exactly the grants given."""

    def __init__(self, *grants: Grant) -> None:
        self.grants = set(grants)

    def __call__(self, operation: Operation, kind: ResourceType, name: str) -> bool:
        return (kind, name, operation) in self.grants

    def topic(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.TOPIC, name)

    def group(self, operation: Operation, name: str) -> bool:
        return self(operation, ResourceType.GROUP, name)

    def cluster(self, operation: Operation) -> bool:
        return self(operation, ResourceType.CLUSTER, "kafka-cluster")


TX_WRITE = (ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE)


def _run(rule: Any, api_key: ApiKey, version: int, request: Any, check: Allowed,
         answer: Any = "served") -> Any:
    ctx = RequestContext(api_key, version, 1, "t", "127.0.0.1", None)  # type: ignore[arg-type]

    async def inner(_ctx: RequestContext, _request: Any) -> Any:
        return answer

    return asyncio.run(rule(ctx, request, inner, check))


def _add_partitions(version: int) -> Any:
    topics = tuple(nested_of(24, version, "AddPartitionsToTxnTopic", name=name,
                             partitions=(0, 1)) for name in ("orders", "audit"))
    return request_of(24, version, v3_and_below_transactional_id="tx",
                      v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                      v3_and_below_topics=topics)


def _partition_errors(response: Any) -> dict[str, set[int]]:
    return {t.name: {int(p.partition_error_code) for p in t.results_by_partition}
            for t in response.results_by_topic_v3_and_below}


def test_add_partitions_needs_the_transactional_id_then_each_topic() -> None:
    rule = transactions._authorize_add_partitions
    for version in range(4):
        denied = _run(rule, ApiKey.ADD_PARTITIONS_TO_TXN, version, _add_partitions(version),
                      Allowed((ResourceType.TOPIC, "orders", Operation.WRITE)))
        assert _partition_errors(denied) == {
            "orders": {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED},
            "audit": {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}}
        one_topic = _run(rule, ApiKey.ADD_PARTITIONS_TO_TXN, version, _add_partitions(version),
                         Allowed(TX_WRITE, (ResourceType.TOPIC, "orders", Operation.WRITE)))
        assert _partition_errors(one_topic) == {
            "orders": {ErrorCode.OPERATION_NOT_ATTEMPTED},
            "audit": {ErrorCode.TOPIC_AUTHORIZATION_FAILED}}
        assert _run(rule, ApiKey.ADD_PARTITIONS_TO_TXN, version, _add_partitions(version),
                    Allowed(TX_WRITE, (ResourceType.TOPIC, "orders", Operation.WRITE),
                            (ResourceType.TOPIC, "audit", Operation.WRITE))) == "served"


def test_batched_add_partitions_is_for_brokers() -> None:
    request = request_of(24, 5, transactions=())
    refused = _run(transactions._authorize_add_partitions, ApiKey.ADD_PARTITIONS_TO_TXN, 5,
                   request, Allowed(TX_WRITE))
    assert int(refused.error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert _run(transactions._authorize_add_partitions, ApiKey.ADD_PARTITIONS_TO_TXN, 5,
                request, Allowed((ResourceType.CLUSTER, "kafka-cluster",
                                  Operation.CLUSTER_ACTION))) == "served"


def test_add_offsets_needs_the_transactional_id_and_group_read() -> None:
    request = request_of(25, 3, transactional_id="tx", producer_id=1, producer_epoch=0,
                         group_id="g")
    rule = transactions._authorize_add_offsets
    assert int(_run(rule, ApiKey.ADD_OFFSETS_TO_TXN, 3, request, Allowed()).error_code) \
        == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert int(_run(rule, ApiKey.ADD_OFFSETS_TO_TXN, 3, request, Allowed(TX_WRITE)).error_code) \
        == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert _run(rule, ApiKey.ADD_OFFSETS_TO_TXN, 3, request,
                Allowed(TX_WRITE, (ResourceType.GROUP, "g", Operation.READ))) == "served"


def test_end_txn_needs_the_transactional_id() -> None:
    request = request_of(26, 4, transactional_id="tx", producer_id=1, producer_epoch=0,
                         committed=True)
    rule = transactions._authorize_end_txn
    assert int(_run(rule, ApiKey.END_TXN, 4, request, Allowed()).error_code) \
        == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _run(rule, ApiKey.END_TXN, 4, request, Allowed(TX_WRITE)) == "served"


def test_describe_and_list_show_only_describable_ids() -> None:
    describe_cls = response_type(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    state_cls = sibling(describe_cls, "TransactionState")
    states = tuple(build(state_cls, error_code=0, transactional_id=name,
                         transaction_state="Ongoing",
                         transaction_timeout=timedelta(seconds=60),
                         transaction_start_time=datetime.fromtimestamp(1, tz=UTC),
                         producer_id=7, producer_epoch=0, topics=())
                   for name in ("mine", "theirs"))
    described = _run(transactions._authorize_describe_transactions,
                     ApiKey.DESCRIBE_TRANSACTIONS, 0, None,
                     Allowed((ResourceType.TRANSACTIONAL_ID, "mine", Operation.DESCRIBE)),
                     build(describe_cls, throttle_time=timedelta(0), transaction_states=states))
    assert [(s.transactional_id, int(s.error_code), s.transaction_state)
            for s in described.transaction_states] == [
        ("mine", 0, "Ongoing"),
        ("theirs", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "")]
    list_cls = response_type(ApiKey.LIST_TRANSACTIONS, 1)
    listed_cls = sibling(list_cls, "TransactionState")
    listed = _run(transactions._authorize_list_transactions, ApiKey.LIST_TRANSACTIONS, 1, None,
                  Allowed((ResourceType.TRANSACTIONAL_ID, "mine", Operation.DESCRIBE)),
                  build(list_cls, throttle_time=timedelta(0), error_code=0,
                        unknown_state_filters=(), transaction_states=tuple(
                            build(listed_cls, transactional_id=name, producer_id=7,
                                  transaction_state="Ongoing") for name in ("mine", "theirs"))))
    assert [s.transactional_id for s in listed.transaction_states] == ["mine"]
