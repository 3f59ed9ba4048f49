"""The contract between the server and the handlers of each Kafka API.

The server owns framing and ordering; a handler only maps one decoded kio request to one kio
response. Keeping that boundary narrow lets the data APIs and the group APIs be written apart
and lets ApiVersions advertise exactly what is registered, never more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.wire import has_message_schema

if TYPE_CHECKING:
    from kgroups.broker.appends import AppendNotifier
    from kgroups.broker.background import TaskCounts
    from kgroups.broker.cluster.leadership import LeadershipView
    from kgroups.broker.config import BrokerConfig
    from kgroups.broker.coordinator_runtime import CoordinatorRuntime
    from kgroups.broker.dynamic_configs import DynamicBrokerConfigs
    from kgroups.broker.kept_answers import KeptAnswers
    from kgroups.broker.metadata_answer import TopicEntryCache
    from kgroups.broker.net.memory_budget import MemoryBudget
    from kgroups.broker.producer_state import ProducerIdAllocator, ProducerStateTable
    from kgroups.broker.security.state import Session
    from kgroups.broker.share_partitions import SharePartitionManager
    from kgroups.broker.share_persister import ShareStatePersister
    from kgroups.broker.share_state_runtime import ShareStateRuntime
    from kgroups.broker.topics import TopicCatalog
    from kgroups.broker.transaction_runtime import TransactionRuntime
    from kgroups.log.config import LogConfig
    from kgroups.log.durability import GroupCommit
    from kgroups.log.manager import LogManager


class HandlerServices(Protocol):
    """What handlers (and the server) may reach of the broker; `kgroups.broker.broker.Broker`
    is the implementation. Naming the parts here, rather than the Broker class, keeps the
    handlers off its start/stop and background work and keeps the import graph a tree."""

    config: BrokerConfig
    log_config: LogConfig
    dynamic_configs: DynamicBrokerConfigs
    registry: HandlerRegistry
    topics: TopicCatalog
    metadata_entries: TopicEntryCache
    # OffsetCommit answers kept encoded; None under an authorizer (its rule reads the answer).
    commit_answers: KeptAnswers | None
    logs: LogManager
    coordinator: CoordinatorRuntime
    transactions: TransactionRuntime
    share_partitions: SharePartitionManager
    share_state: ShareStateRuntime
    share_persister: ShareStatePersister  # the share state of any key (in a cluster, routed)
    group_commit: GroupCommit
    appends: AppendNotifier
    memory: MemoryBudget
    producer_ids: ProducerIdAllocator
    producer_states: ProducerStateTable
    advertised_host: str
    task_counts: TaskCounts  # crashes and restarts of background work, network processes too
    # Who leads what, in cluster mode (kgroups.storage); None: a broker on its own.
    leadership: LeadershipView | None

    @property
    def node_id(self) -> int: ...

    @property
    def advertised_port(self) -> int: ...


@dataclass(slots=True)
class RequestContext:
    """What a handler may know about the request beyond its body. Made for every request and
    never changed (a rule that narrows it passes a `dataclasses.replace` copy on); not frozen,
    as a frozen dataclass's __init__ sets each field through object.__setattr__, which cost 2%
    of an OffsetCommit's and 7% of a Metadata's broker CPU."""

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    broker: HandlerServices
    # The connection's listener and authenticated principal (None only in handler unit tests).
    session: Session | None = None
    # Which of the given topics the principal may Describe, set by the ACL check of APIs whose
    # broker-side work depends on it (a regex subscription's matches); None: no authorizer.
    describable_topics: Callable[[Iterable[str]], frozenset[str]] | None = None
    # Which of the given topics the principal may create (CREATE on the cluster or the topic),
    # set by the ACL check of StreamsGroupHeartbeat, whose answer creates internal topics;
    # None: no authorizer.
    creatable_topics: Callable[[Iterable[str]], frozenset[str]] | None = None


class ApiHandler(Protocol):
    """One Kafka API: decoded kio request in, kio response out (None = send nothing, acks=0).
    The key and version range are read-only, as the frozen handlers hold them."""

    @property
    def api_key(self) -> ApiKey: ...

    @property
    def min_version(self) -> int: ...

    @property
    def max_version(self) -> int: ...

    async def __call__(self, ctx: RequestContext, request: Any) -> Any: ...


class CloseConnection(Exception):
    """Raised by a handler that must answer by closing the connection, as Kafka does for an
    acks=0 produce that failed (the client learns of the failure only that way)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DuplicateHandlerError(ValueError):
    """Two handlers claimed one API key: a wiring mistake that must fail loudly at start-up."""


class UnknownApiError(ValueError):
    """A handler claimed an API key or version that has no Kafka message: a wiring mistake
    that must fail at start-up, not when the first client asks."""


class HandlerRegistry:
    """The APIs this broker answers, keyed by API key; the source of truth for ApiVersions."""

    def __init__(self) -> None:
        self._handlers: dict[int, ApiHandler] = {}

    def register(self, handler: ApiHandler) -> None:
        if handler.api_key in self._handlers:
            raise DuplicateHandlerError(f"API key {handler.api_key} is already registered")
        for version in range(handler.min_version, handler.max_version + 1):
            if not has_message_schema(handler.api_key, version):
                raise UnknownApiError(
                    f"API key {handler.api_key} v{version} has no message schema")
        self._handlers[handler.api_key] = handler

    def get(self, api_key: int) -> ApiHandler | None:
        return self._handlers.get(api_key)

    def supports(self, api_key: int, api_version: int) -> bool:
        handler = self._handlers.get(api_key)
        return handler is not None and handler.min_version <= api_version <= handler.max_version

    def __iter__(self) -> Iterator[ApiHandler]:
        return iter(sorted(self._handlers.values(), key=lambda h: h.api_key))

    def __len__(self) -> int:
        return len(self._handlers)


HandlerFunction = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class FunctionHandler:
    """An ApiHandler made from one coroutine function and the versions it speaks."""

    api_key: ApiKey
    min_version: int
    max_version: int
    function: HandlerFunction

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        return await self.function(ctx, request)


def handles(api_key: ApiKey, min_version: int, max_version: int) -> Callable[
    [HandlerFunction], FunctionHandler
]:
    """Decorator: `@handles(ApiKey.METADATA, 0, 12) async def metadata(ctx, request): ...`."""

    def wrap(function: HandlerFunction) -> FunctionHandler:
        return FunctionHandler(api_key, min_version, max_version, function)

    return wrap
