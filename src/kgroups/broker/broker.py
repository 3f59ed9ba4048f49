"""The Broker: one object owning the config, the log, durability, topics and the API handlers.

Handlers reach everything through `ctx.broker`, so there is no module-level state and a test
can run several brokers in one process.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Awaitable, Sequence

import psycopg

from kgroups.broker.apis import (
    acls,
    cluster,
    configs,
    delete_records,
    describe_producers,
    fetch,
    groups,
    leader_epochs,
    list_offsets,
    produce,
    quotas,
    scram_credentials,
    share_fetch,
    share_state,
    streams_groups,
    topics,
    transactions,
    txn_offset_commit,
    write_txn_markers,
)
from kgroups.broker.apis.contract import HandlerRegistry
from kgroups.broker.appends import AppendNotifier
from kgroups.broker.background import BackgroundTasks, TaskCounts
from kgroups.broker.cluster.catalog_books import StoreBrokerConfigs
from kgroups.broker.cluster.catalog_sync import catalog_changed
from kgroups.broker.cluster.leadership import LeadershipView
from kgroups.broker.cluster.marker_sender import MarkerRouter
from kgroups.broker.cluster.runtime import ClusterRuntime, ClusterSettings, LeaseHandlers
from kgroups.broker.cluster.share_state_sender import ShareStateRouter
from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.broker.coordinator_runtime import CoordinatorRuntime
from kgroups.broker.dynamic_configs import DynamicBrokerConfigs
from kgroups.broker.events import log_event
from kgroups.broker.group_configs import SHARE_MAX_SESSIONS, SHARE_MAX_SESSIONS_DEFAULT
from kgroups.broker.kept_answers import KeptAnswers
from kgroups.broker.log_cleaner import run_cleaner
from kgroups.broker.metadata_answer import TopicEntryCache
from kgroups.broker.net.memory_budget import MemoryBudget
from kgroups.broker.net.server import BrokerServer
from kgroups.broker.producer_state import ProducerIdAllocator, ProducerStateTable
from kgroups.broker.security import sasl
from kgroups.broker.security.acl_enforcement import authorized_registry
from kgroups.broker.security.state import Security
from kgroups.broker.share_partitions import (
    SharePartitionManager,
    share_settings,
)
from kgroups.broker.share_persister import ShareStatePersister
from kgroups.broker.share_state_runtime import ShareStateRuntime
from kgroups.broker.topics import (
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
    TopicCatalog,
)
from kgroups.broker.transaction_runtime import TransactionRuntime
from kgroups.broker.txn_markers import write_markers
from kgroups.errors import ErrorCode
from kgroups.log.durability import GroupCommit, flush_on_schedule
from kgroups.log.manager import LogManager
from kgroups.storage.postgresql import Lease, PostgresStore
from kgroups.transactions.messages import MarkerWrite

logger = logging.getLogger("kgroups.broker")

def install_handlers(registry: HandlerRegistry) -> None:
    """Every API the broker answers, module by module; ApiVersions advertises their union."""
    cluster.install(registry)
    topics.install(registry)
    configs.install(registry)
    produce.install(registry)
    fetch.install(registry)
    list_offsets.install(registry)
    delete_records.install(registry)
    leader_epochs.install(registry)
    groups.install(registry)
    txn_offset_commit.install(registry)
    sasl.install(registry)
    scram_credentials.install(registry)
    acls.install(registry)
    quotas.install(registry)
    write_txn_markers.install(registry)
    describe_producers.install(registry)
    transactions.install(registry)
    share_fetch.install(registry)
    share_state.install(registry)
    streams_groups.install(registry)


WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def advertised_host(config: BrokerConfig) -> str:
    """The host clients are told to connect to: from `advertised.listeners`, else the listen
    host, else this machine's name when listening on every interface."""
    listener = config.advertised_listener
    if listener is not None:
        return listener[0]
    return socket.gethostname() if config.host in WILDCARD_HOSTS else config.host


def cluster_settings(config: BrokerConfig, url: str) -> ClusterSettings:
    return ClusterSettings(
        url=url, node_id=config.node_id,
        session_timeout_ms=config.cluster_int("broker.session.timeout.ms"),
        heartbeat_interval_ms=config.cluster_int("broker.heartbeat.interval.ms"),
        lease_ms=config.lease_ms,
        catalog_poll_interval_ms=config.cluster_int("kgroups.catalog.poll.interval.ms"))


def ensure_offsets_topic(store: PostgresStore, partitions: int) -> None:
    """Create __consumer_offsets in the store the first time any broker starts; a store made
    with another partition count would move groups between coordinators, so it stops here."""
    existing = store.topics().get(OFFSETS_TOPIC)
    if existing is None:
        try:
            store.create_topic(OFFSETS_TOPIC, uuid.uuid4(), partitions)
        except psycopg.errors.UniqueViolation:  # another broker created it just now
            existing = store.topics()[OFFSETS_TOPIC]
    if existing is not None and existing[1] != partitions:
        raise ConfigError(
            f"{OFFSETS_TOPIC} has {existing[1]} partitions in the store but "
            f"offsets.topic.num.partitions is {partitions}; group placement would change")


class Broker:
    """A Kafka-compatible broker: on its own (the data directory), it is the controller and
    every partition's leader; in cluster mode (`kgroups.storage`) one member of a cluster on
    PostgreSQL, leading the partitions it holds the lease of (docs/cluster.md)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # Cluster mode: the event loop's store (StorageUnavailableError, naming the server,
        # when it cannot be reached), the leadership view and the membership runtime.
        self.store: PostgresStore | None = None
        self.leadership: LeadershipView | None = None
        self.cluster: ClusterRuntime | None = None
        url = config.storage_url
        if url is not None:
            settings = cluster_settings(config, url)
            self.store = PostgresStore.open(url, settings.session_timeout_ms,
                                            idle_transaction_timeout_ms=settings.lease_ms)
            ensure_offsets_topic(self.store, config.offsets_topic_num_partitions)
            self.leadership = LeadershipView(config.node_id)
            self.cluster = ClusterRuntime(settings, self.leadership)
            self.cluster.open()
        # Set when the broker must stop on its own (its node id was taken over), with why.
        self.must_stop = asyncio.Event()
        self.stop_reason: str | None = None
        # The static settings with the dynamic broker configs saved by IncrementalAlterConfigs.
        # In a cluster they, the topics, ACLs and SCRAM users are the store's catalog's.
        self.dynamic_configs = DynamicBrokerConfigs(
            config.data_dir if self.store is None
            else StoreBrokerConfigs(self.store.catalog, config.node_id), config.properties)
        self.log_config = self.dynamic_configs.log_config()
        self.logs = LogManager(config.data_dir, self.log_config)
        self.group_commit = GroupCommit()
        self.topics = (TopicCatalog(self.logs) if self.store is None or self.leadership is None
                       else TopicCatalog.on_store(self.logs, self.store, self.leadership))
        self.appends = AppendNotifier()
        self.producer_ids = ProducerIdAllocator(
            None if self.store is None else self.store.allocate_producer_ids)
        self.producer_states = ProducerStateTable()
        self.registry = HandlerRegistry()
        # Shared by every connection, and by Fetch long polls before they read (apis/fetch.py).
        self.memory = MemoryBudget(config.queued_max_request_bytes,
                                   config.memory_exhausted_close_ms / 1000)
        install_handlers(self.registry)
        self.security = Security(config, None if self.store is None else self.store.catalog)
        if self.security.authorizer is not None:  # every API behind its ACL check
            self.registry = authorized_registry(self.registry, self.security.authorizer)
        # Metadata's encoded topic entries, kept to the topics that exist; whole answers too
        # where nothing but the topics changes them (a broker on its own, no authorizer).
        self.metadata_entries = TopicEntryCache(
            whole_answers=self.leadership is None and self.security.authorizer is None)
        self.topics.on_change(
            lambda: self.metadata_entries.topics_changed(self.topics.partition_counts()))
        # OffsetCommit answers as bytes, but under an authorizer (its rule reads the answer).
        self.commit_answers = None if self.security.authorizer is not None else KeptAnswers()
        self._server = BrokerServer(self, self.security)
        # Each listener's bound address, by listener name, once started.
        self.listener_addresses: dict[str, tuple[str, int]] = {}
        # Crashes and restarts of every background task of this broker, by name (metrics).
        self.task_counts = TaskCounts()
        self.background = BackgroundTasks(self.task_counts)
        self.coordinator = CoordinatorRuntime(config, self.topics, self.logs, self.appends,
                                              self.group_commit, self.task_counts)
        self.topics.on_change(self.coordinator.topics_changed)
        def write_local_markers(markers: Sequence[MarkerWrite]) -> Awaitable[list[ErrorCode]]:
            return write_markers(self, markers)

        # In a cluster each marker goes to its partition's leader (broker/cluster/).
        send_markers = (write_local_markers if self.leadership is None
                        else MarkerRouter(self.leadership, write_local_markers).send)
        self.transactions = TransactionRuntime(
            config, self.topics, self.logs, self.group_commit, self.appends, self.task_counts,
            self.producer_ids.next_id, send_markers)
        # The share coordinator (__share_group_state); also the share partitions' and the
        # group coordinator's ShareStatePersister.
        self.share_state = ShareStateRuntime(config, self.topics, self.logs, self.group_commit,
                                             self.appends, self.task_counts,
                                             cluster_mode=self.cluster is not None)
        # In a cluster each share-partition's state is kept by the leader of its
        # __share_group_state partition (broker/cluster/share_state_sender.py).
        self.share_persister: ShareStatePersister = (
            self.share_state if self.leadership is None
            else ShareStateRouter(self.leadership, self.share_state))
        # Share groups' partitions (ShareFetch/ShareAcknowledge), their state kept by it.
        supplied = config.supplied()
        self.share_partitions = SharePartitionManager(
            self.topics, share_settings(supplied),
            int(supplied.get(SHARE_MAX_SESSIONS, SHARE_MAX_SESSIONS_DEFAULT)),
            self.background, self.share_persister)
        if self.cluster is not None:
            cluster = self.cluster
            self.coordinator.give_up = lambda partition: cluster.drop(OFFSETS_TOPIC, partition)
            self.transactions.give_up = (
                lambda partition: cluster.drop(TRANSACTION_STATE_TOPIC, partition))
            self.share_state.give_up = (
                lambda partition: cluster.drop(SHARE_STATE_TOPIC, partition))
        self.host = config.host
        self.port = config.port
        self.advertised_host = advertised_host(config)

    def task_failures(self) -> dict[str, str]:
        """Background work that crashed (name -> its last error): the broker's own tasks,
        the coordinator's (its loader, its offsets cleaner), the transaction coordinator's
        (its timers, its markers) and fsyncs (`group-commit`). The
        loops among them were started again (`BackgroundTasks.supervise`)."""
        failures = {**self.background.failures, **self.coordinator.background.failures,
                    **self.transactions.background.failures,
                    **self.share_state.background.failures}
        if self.group_commit.crash is not None:
            failures["group-commit"] = self.group_commit.crash
        return failures

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def advertised_port(self) -> int:
        """The port clients are told to connect to (advertised.listeners, else the bound one)."""
        listener = self.config.advertised_listener
        return listener[1] if listener is not None else self.port

    async def start(self) -> None:
        """Start the group coordinator (it replays __consumer_offsets in the background) and
        the log cleaner, then listen; afterwards `self.port` is the bound port (--port 0)."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        await self.coordinator.start()
        if self.coordinator.metrics is not None:  # metrics served: the transactions' too
            self.transactions.metrics = self.coordinator.metrics.watch_transactions(
                self.transactions.coordinator)
            self.coordinator.metrics.watch_share_partitions(self.share_partitions.counts)
        await self.transactions.start()
        self.share_partitions.start()
        self.share_state.start()
        self.background.supervise("log-cleaner", lambda: run_cleaner(
            self.logs, self.topics, self.config.log_retention_check_interval_ms))
        self.background.supervise("log-flusher", lambda: flush_on_schedule(
            self.group_commit, self.logs.open_logs, self.log_config.flush_scheduler_interval_ms))
        self.listener_addresses = await self._server.start()
        self.host, self.port = next(iter(self.listener_addresses.values()))
        if self.cluster is not None:  # DuplicateNodeIdError while the node id is live
            self.cluster.join(self.advertised_host, self.advertised_port, LeaseHandlers(
                gained=self._lease_gained, lost=self._lease_lost, fatal=self._node_id_taken,
                catalog=lambda: catalog_changed(self)))
        log_event(logger, logging.INFO, "broker_started", host=self.host, port=self.port,
                  data_dir=self.config.data_dir, apis=len(self.registry))

    def _lease_gained(self, lease: Lease) -> None:
        self.topics.leadership_gained(lease)
        if lease.topic == OFFSETS_TOPIC:
            self.coordinator.partition_gained(lease.partition)
        elif lease.topic == TRANSACTION_STATE_TOPIC:
            self.transactions.partition_gained(lease.partition)
        elif lease.topic == SHARE_STATE_TOPIC:
            self.share_state.partition_gained(lease.partition)

    def _lease_lost(self, topic: str, partition: int) -> None:
        if topic == OFFSETS_TOPIC:
            self.coordinator.partition_lost(partition)
        elif topic == TRANSACTION_STATE_TOPIC:
            self.transactions.partition_lost(partition)
        elif topic == SHARE_STATE_TOPIC:
            self.share_state.partition_lost(partition)
        self.topics.leadership_lost(topic, partition)

    def _node_id_taken(self, reason: str) -> None:
        self.stop_reason = reason
        self.must_stop.set()

    async def stop(self) -> None:
        """Stop accepting, close connections, make everything written durable, close files.
        In cluster mode the leases are handed over first (a controlled shutdown), so other
        brokers take this one's partitions while its clients are still being answered."""
        if self.cluster is not None:
            await self.cluster.stop()
        await self._server.stop()
        await self.coordinator.stop()
        await self.transactions.stop()
        await self.share_state.stop()
        await self.background.cancel_all()
        offline = self.logs.offline()  # never opened: nothing of theirs to flush
        for topic, partition in self.logs.partitions():
            if (topic, partition) in offline:
                continue
            try:
                log = self.logs.get(topic, partition)
                if log is not None:
                    log.flush()
            except OSError as exc:  # offline, or the disk failed: the rest still get flushed
                log_event(logger, logging.ERROR, "final_flush_failed", topic=topic,
                          partition=partition, error=exc)
        self.logs.close()
        if self.store is not None:
            self.store.close()
        log_event(logger, logging.INFO, "broker_stopped", port=self.port)
