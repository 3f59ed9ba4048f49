"""The membership runtime: keeps this broker a member of the cluster and tells the rest of the
broker which partitions it gained and lost.

Two threads, neither on the event loop (each blocks on the database):
- the *step thread* runs `ClusterMember.step()` every `broker.heartbeat.interval.ms`, and at
  once when the listener hears that some broker released leases (a controlled shutdown, a
  hand-back) or took them (after a crash: this broker's FindCoordinator and Metadata name the
  new leader at once instead of "no leader" until the next heartbeat); after each step it
  reads every partition's leader and the live brokers and hands both, with the leases gained
  and lost, to the event loop;
- the *listener thread* waits on a `ChangeListener` (LISTEN/NOTIFY), wakes the step thread
  when leases moved and hands catalog changes (another broker created a topic,
  changed settings, ACLs or users) to the event loop, at most kgroups.catalog.poll.interval.ms
  late.

The step thread owns its PostgresStore (one psycopg connection per thread): the loop's store
(appends, catalog) never waits behind a heartbeat, and a slow step never stalls a request.

On the event loop, `_deliver` updates the LeadershipView first and then calls the broker's
`on_gained` / `on_lost` for every lease change, data partitions and `__consumer_offsets-N`
alike. A step that cannot reach the store keeps the leases it holds until `safe_until`
(the moment they may have run out); past it they are given up locally, so a broker cut off
from PostgreSQL stops serving before another broker can take over. Fencing in the store is
what makes that safe even when the local clock is wrong: this only stops answering early.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kgroups.broker.cluster.leadership import BrokerEndpoint, Leader, LeadershipView
from kgroups.broker.events import log_event
from kgroups.storage.membership import ClusterMember, LeaseChanges, NodeIdTakenError
from kgroups.storage.notifications import ChangeListener
from kgroups.storage.placement import Partition
from kgroups.storage.postgresql import Lease, PostgresStore, StorageUnavailableError

logger = logging.getLogger("kgroups.cluster")

# Errors of a store that could not be reached or lost its connection mid-step.


# What one step hands the event loop: the lease changes, every partition's leader, the brokers.
Outcome = tuple[LeaseChanges, dict[Partition, Leader], list[BrokerEndpoint]]


@dataclass(frozen=True)
class ClusterSettings:
    url: str
    node_id: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    lease_ms: int
    catalog_poll_interval_ms: int


@dataclass(frozen=True)
class LeaseHandlers:
    """What the broker does, on its event loop, when a lease is gained or lost, when the
    store's catalog changed (topics, settings, ACLs, SCRAM users: catalog_sync), and when it
    must stop (its node id was taken over)."""
    gained: Callable[[Lease], None]
    lost: Callable[[str, int], None]
    fatal: Callable[[str], None]
    catalog: Callable[[], None]


def view_contents(store: PostgresStore) -> tuple[dict[Partition, Leader], list[BrokerEndpoint]]:
    """Every partition's current leader and the live brokers, as the view holds them."""
    leaders = {(row.topic, row.partition): Leader(row.leader, row.epoch)
               for row in store.leadership() if row.current}
    brokers = [BrokerEndpoint(broker.node_id, broker.host, broker.port, broker.rack)
               for broker in store.registry.live_brokers()]
    return leaders, brokers


class ClusterRuntime:
    """Owned by the Broker in cluster mode: `open` at construction (so an unreachable store
    stops the broker before anything else starts), `join` once listening, `stop` first when
    stopping."""

    def __init__(self, settings: ClusterSettings, view: LeadershipView) -> None:
        self.settings = settings
        self.view = view
        self._store: PostgresStore | None = None
        self._member: ClusterMember | None = None
        self._listener: ChangeListener | None = None
        self._handlers: LeaseHandlers | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._step_thread: threading.Thread | None = None
        self._listener_thread: threading.Thread | None = None
        self._to_drop: set[Partition] = set()
        self._drop_lock = threading.Lock()

    def open(self) -> None:
        """Connect (StorageUnavailableError naming the server, never its password); the store
        is the step thread's from `join` on."""
        self._store = PostgresStore.open(self.settings.url, self.settings.session_timeout_ms,
                                         idle_transaction_timeout_ms=self.settings.lease_ms)

    def join(self, host: str, port: int, handlers: LeaseHandlers) -> None:
        """Register (DuplicateNodeIdError while a live broker has the node id), take this
        broker's share of the leases at once, and start the two threads."""
        assert self._store is not None, "open() first"
        self._loop = asyncio.get_running_loop()
        self._handlers = handlers
        self._member = ClusterMember.join(self._store, self.settings.node_id, host, port,
                                          lease_ms=self.settings.lease_ms)
        self._listener = ChangeListener.open(self.settings.url,
                                             self.settings.catalog_poll_interval_ms)
        log_event(logger, logging.INFO, "cluster_joined", node=self.settings.node_id,
                  host=host, port=port, incarnation=self._member.registration.incarnation)
        self._deliver(*self._step(self._member, self._store))
        self._step_thread = threading.Thread(target=self._run_steps, name="cluster-steps",
                                             daemon=True)
        self._listener_thread = threading.Thread(target=self._run_listener,
                                                 name="cluster-listener", daemon=True)
        self._step_thread.start()
        self._listener_thread.start()

    def drop(self, topic: str, partition: int) -> None:
        """Give a lease up (a write was fenced: another broker leads, or the lease lapsed):
        released at the next step instead of renewed, so the partition is taken again at a
        new epoch (and reloaded) rather than served from state that may be stale."""
        with self._drop_lock:
            self._to_drop.add((topic, partition))
        self._wake.set()

    # -- the step thread ---------------------------------------------------------------------

    def _run_steps(self) -> None:
        assert self._member is not None and self._store is not None
        interval_s = self.settings.heartbeat_interval_ms / 1000
        while not self._stopping.is_set():
            self._wake.wait(interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            held = sorted(self._member.held)
            outcome: Outcome | None
            try:
                # After an outage the store connects again by itself (storage/database.py):
                # the next step renews what is still this broker's on the same registration.
                outcome = self._step(self._member, self._store)
            except NodeIdTakenError as exc:
                self._call_soon(self._fatal, held, str(exc))
                return
            except StorageUnavailableError as exc:
                outcome = self._unreachable(self._member, exc)
            except Exception as exc:  # a bug: logged with its traceback, the loop goes on
                logger.error("cluster step failed", exc_info=exc)
                continue
            if outcome is not None:
                self._call_soon(self._deliver, *outcome)

    def _step(self, member: ClusterMember, store: PostgresStore) -> Outcome:
        with self._drop_lock:
            dropped, self._to_drop = self._to_drop, set()
        for key in sorted(dropped):
            lease = member.held.pop(key, None)
            if lease is not None:
                store.release_lease(lease)
        changes = member.step()
        changes.lost = sorted({*changes.lost, *dropped})
        return (changes, *view_contents(store))

    def _unreachable(self, member: ClusterMember, error: BaseException) -> Outcome | None:
        """The store did not answer: keep serving until the leases may have run out, then
        give them all up locally (the view empties with them)."""
        log_event(logger, logging.WARNING, "cluster_step_failed", error=error)
        if time.monotonic() < member.safe_until or not member.held:
            return None
        lost = sorted(member.held)
        member.held.clear()
        log_event(logger, logging.ERROR, "leases_abandoned", partitions=len(lost),
                  reason="store unreachable past the lease")
        return LeaseChanges(lost=lost), {}, []

    def _run_listener(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                changes = self._listener.poll(1.0)
            except StorageUnavailableError:
                # The step thread reports the outage and goes on at its interval; the listener
                # connects again by itself and then reports a catalog change and released
                # leases, so nothing missed meanwhile is lost.
                self._stopping.wait(self.settings.heartbeat_interval_ms / 1000)
                continue
            if changes.leases_moved:
                self._wake.set()
            if changes.catalog_version is not None:
                self._call_soon(self._catalog_changed)

    def _call_soon(self, callback: Callable[..., None], *args: object) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed while the broker stopped
            self._loop.call_soon_threadsafe(callback, *args)

    # -- on the event loop -------------------------------------------------------------------

    def _deliver(self, changes: LeaseChanges, leaders: dict[Partition, Leader],
                 brokers: list[BrokerEndpoint]) -> None:
        assert self._handlers is not None
        self.view.update(leaders, brokers)
        for topic, partition in changes.lost:
            log_event(logger, logging.INFO, "leadership_lost", topic=topic, partition=partition)
            self._handlers.lost(topic, partition)
        for lease in changes.gained:
            log_event(logger, logging.INFO, "leadership_gained", topic=lease.topic,
                      partition=lease.partition, epoch=lease.epoch)
            try:
                self._handlers.gained(lease)
            except Exception as exc:
                # Not taken up here (the store failed while opening its log, say): the lease
                # is given up at the next step, as lost, and taken again afresh; the other
                # gained partitions are still taken up.
                log_event(logger, logging.ERROR, "leadership_not_taken", topic=lease.topic,
                          partition=lease.partition, error=exc)
                self.drop(lease.topic, lease.partition)

    def _catalog_changed(self) -> None:
        assert self._handlers is not None
        try:
            self._handlers.catalog()
        except Exception as exc:  # the store failed mid-read: the next change reads it again
            log_event(logger, logging.ERROR, "catalog_reload_failed", error=exc)

    def _fatal(self, held: list[Partition], reason: str) -> None:
        assert self._handlers is not None
        for topic, partition in held:
            self._handlers.lost(topic, partition)
        self._member = None  # taken over: nothing of this registration is left to give up
        self._handlers.fatal(reason)

    async def _await_takeover(self, store: PostgresStore, given_up: list[Partition]) -> None:
        """Until the others have taken the partitions given up (at most a heartbeat interval),
        keep the view current: clients still connected here are sent straight to the new
        leaders and coordinators instead of being told that there are none yet."""
        deadline = time.monotonic() + self.settings.heartbeat_interval_ms / 1000
        while True:
            leaders, brokers = view_contents(store)
            self.view.update(leaders, brokers)
            if all(key in leaders for key in given_up) or time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Controlled shutdown (Kafka's): stop the step thread, give every partition up
        locally (its requests now get NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER), then release
        every lease and deregister, which wakes the other brokers to take them at once. The
        listener (its own connection) is waited for only afterwards: it may be in a poll."""
        self._stopping.set()
        self._wake.set()
        if self._step_thread is not None:
            await asyncio.to_thread(self._step_thread.join, 5.0)
        member, store = self._member, self._store
        if member is not None and store is not None and self._handlers is not None:
            for topic, partition in sorted(member.held):
                self._handlers.lost(topic, partition)
            try:
                given_up = member.leave()
                await self._await_takeover(store, given_up)
            except StorageUnavailableError as exc:
                log_event(logger, logging.WARNING, "cluster_leave_failed", error=exc)
            else:
                log_event(logger, logging.INFO, "cluster_left", node=self.settings.node_id,
                          partitions=len(given_up))
        self._member = None
        if self._listener_thread is not None:
            await asyncio.to_thread(self._listener_thread.join, 5.0)
        self._step_thread = self._listener_thread = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if store is not None:
            store.close()
            self._store = None
