"""The broker's share partitions: loading each from the share coordinator, the share sessions
of ShareFetch and ShareAcknowledge, acquisition locks timing out, sessions closing.

A share partition (kgroups.share.partition) is loaded on first use: its state read through the
`ShareStatePersister`; one initialized without a start offset (the group coordinator
initializes a share partition before assigning it) starts where `share.auto.offset.reset`
says; one never initialized is not loaded (its fetches fail, as on Kafka 4.3.1). Every
change the share coordinator must keep (acknowledgements, releases, lock timeouts) is written
before the request that made it is answered, one write at a time per share partition, the
latest state each time. An acquisition alone is not written: after a restart its records are
offered again with the delivery count last written (Kafka's at-least-once promise).

One background task sleeps until the earliest acquisition lock's deadline and releases what
timed out. A ShareFetch long poll tries again on an append to one of its partitions, or when
its share partition is marked fetchable (`wakes`): a lock of it timed out, or an
acknowledgement or release moved its start offset (room under the in-flight limit). Records a
member released (RELEASE, its session or connection closing) without the start
moving wake no one, as on Kafka 4.3.1: a waiting fetch takes them when it next tries, at the
latest when its MaxWait ends. So the records a closing KafkaShareConsumer had handed to its
application (it does not acknowledge its last poll's records on close) are not delivered at
once to a member whose fetch was waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace

from kgroups.broker.appends import AppendNotifier
from kgroups.broker.background import BackgroundTasks
from kgroups.broker.events import log_event
from kgroups.broker.group_configs import group_setting
from kgroups.broker.share_persister import ShareStatePersister
from kgroups.broker.topics import TopicCatalog
from kgroups.errors import KAFKA_MESSAGES, ErrorCode
from kgroups.share.acknowledgements import AckBatch, is_valid_request
from kgroups.share.counts import ShareCounts
from kgroups.share.partition import AckOutcome, SharePartition
from kgroups.share.persisted import PersistedShareState, SharePartitionKey
from kgroups.share.sessions import ShareSession, ShareSessions
from kgroups.share.settings import ShareSettings, start_from
from kgroups.storage.log_seam import PartitionLogSeam

logger = logging.getLogger("kgroups.share")
# Write answers meaning the share coordinator's state is no longer the one loaded here.
STALE = frozenset({ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH,
                   ErrorCode.INVALID_REQUEST})
# A share partition whose state does not load answers as Kafka 4.3.1's SharePartition maps the
# share coordinator's error (any other: UNKNOWN_SERVER_ERROR; a state never initialized is
# INVALID_REQUEST there).
LOAD_ERRORS = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.GROUP_ID_NOT_FOUND: ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_STATE_EPOCH: ErrorCode.FENCED_STATE_EPOCH,
    ErrorCode.FENCED_LEADER_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
}


def share_settings(supplied: Mapping[str, str]) -> ShareSettings:
    """The share group configs every group runs by (kgroups keeps no per-group configs)."""
    return ShareSettings(
        record_lock_duration_ms=int(group_setting(supplied, "share.record.lock.duration.ms")),
        delivery_count_limit=int(group_setting(supplied, "share.delivery.count.limit")),
        max_record_locks=int(group_setting(supplied, "share.partition.max.record.locks")),
        read_committed=group_setting(supplied, "share.isolation.level") == "read_committed",
        auto_offset_reset=group_setting(supplied, "share.auto.offset.reset"),
        renew_enabled=group_setting(supplied, "share.renew.acknowledge.enable") == "true")


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class SharePartitionManager:
    def __init__(self, topics: TopicCatalog, settings: ShareSettings, max_sessions: int,
                 background: BackgroundTasks, persister: ShareStatePersister) -> None:
        self.topics = topics
        self.settings = settings
        self.sessions = ShareSessions(max_sessions)
        self.persister = persister  # the share coordinator (`broker.share_state`)
        self.fetchable = AppendNotifier()  # a share partition's `wakes` count moved
        self._wakes: dict[SharePartitionKey, int] = {}
        self._partitions: dict[SharePartitionKey, SharePartition] = {}
        self._loading: dict[SharePartitionKey, asyncio.Future[SharePartition | ErrorCode]] = {}
        self._writing: dict[SharePartitionKey, asyncio.Lock] = {}
        self._timers_changed = asyncio.Event()
        self._background = background
        # Deliveries, acknowledgements and archivals since start, for the metrics endpoint.
        self.counts = ShareCounts()

    def start(self) -> None:
        self._background.supervise("share-lock-timers", self._run_lock_timers)

    # --- loading ----------------------------------------------------------------------------

    async def partition(self, key: SharePartitionKey,
                        topic: str) -> SharePartition | ErrorCode:
        """The loaded share partition, loading it once however many ask at the same time."""
        loaded = self._partitions.get(key)
        if loaded is not None:
            return loaded
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key, topic))
            self._loading[key] = pending
            pending.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(pending)

    async def _load(self, key: SharePartitionKey, topic: str) -> SharePartition | ErrorCode:
        """The share partition from its persisted state, or why it cannot be served (each
        fetch tries again): a log that cannot be read is KAFKA_STORAGE_ERROR, as for Fetch."""
        try:
            return await self._load_from_log(key, topic)
        except OSError:  # the partition's log is offline (logged once, where it failed)
            return ErrorCode.KAFKA_STORAGE_ERROR

    async def _load_from_log(self, key: SharePartitionKey,
                             topic: str) -> SharePartition | ErrorCode:
        log = self.topics.log(topic, key.partition)
        if log is None:  # not led here (a cluster's other broker), or no such partition
            return self.topics.unserved_error(topic, key.partition)
        result = await self.persister.read(key, self._leader_epoch(topic, key.partition))
        state = result.state
        if result.error != ErrorCode.NONE or state is None:
            # Not loaded: the next fetch tries again. One never initialized (no share group
            # was assigned it: the id of another kind of group, say) is refused, not started.
            return LOAD_ERRORS.get(result.error, ErrorCode.UNKNOWN_SERVER_ERROR)
        if state.start_offset < 0:
            # Initialized without a start (the group coordinator's way): chosen now, and kept,
            # so a reload does not choose again past records produced since.
            state = replace(state, start_offset=self._reset_offset(log), batches=())
            error = await self.persister.write(key, state)
            if error != ErrorCode.NONE:
                return error
        share_partition = SharePartition(state, self.settings, self.counts)
        share_partition.move_start_to(log.log_start_offset)
        self._partitions[key] = share_partition
        return share_partition

    def _leader_epoch(self, topic: str, partition: int) -> int:
        epoch = self.topics.leader_epoch(topic, partition)
        return 0 if epoch is None else epoch

    def _reset_offset(self, log: PartitionLogSeam) -> int:
        where = start_from(self.settings.auto_offset_reset)
        if where.earliest:
            return log.log_start_offset
        if where.duration_ms is not None:
            found = log.offset_for_timestamp(int(time.time() * 1000) - where.duration_ms)
            return log.log_end_offset if found is None else found
        return log.log_end_offset

    # --- waking waiting fetches -------------------------------------------------------------

    def wakes(self, key: SharePartitionKey) -> int:
        """How often fetches of `key` were told to try again: a waiting fetch compares it."""
        return self._wakes.get(key, 0)

    def _wake(self, keys: Iterable[SharePartitionKey]) -> None:
        chosen = list(keys)
        for key in chosen:
            self._wakes[key] = self._wakes.get(key, 0) + 1
        if chosen:
            self.fetchable.notify()

    # --- changes ----------------------------------------------------------------------------

    async def acknowledge(self, key: SharePartitionKey, topic: str, member_id: str,
                          batches: list[AckBatch], renew_allowed: bool) -> AckOutcome:
        """Apply one partition's acknowledgements and write the state they leave."""
        if not is_valid_request(batches, renew_allowed and self.settings.renew_enabled):
            return AckOutcome(ErrorCode.INVALID_REQUEST)
        share_partition = await self.partition(key, topic)
        if isinstance(share_partition, ErrorCode):
            # Kafka acknowledges only to a share partition it holds; one that failed to load
            # is not held.
            return AckOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              KAFKA_MESSAGES[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
        start = share_partition.start_offset
        outcome = share_partition.acknowledge(member_id, batches, now_ms())
        if outcome.error != ErrorCode.NONE:
            return outcome
        if share_partition.start_offset != start:
            self._wake([key])
        self._timers_changed.set()
        return AckOutcome(await self.write(key, outcome.state))

    async def write(self, key: SharePartitionKey,
                    state: PersistedShareState | None = None) -> ErrorCode:
        """Write `state`, else the share partition's current state (the latest when several
        wait)."""
        share_partition = self._partitions.get(key)
        if share_partition is None:
            return ErrorCode.NONE
        lock = self._writing.setdefault(key, asyncio.Lock())
        async with lock:
            error = await self.persister.write(
                key, share_partition.persisted() if state is None else state)
        if error != ErrorCode.NONE:
            log_event(logger, logging.WARNING, "share_state_write_failed", group=key.group_id,
                      partition=key.partition, error=error.name)
        if error in STALE and self._partitions.get(key) is share_partition:
            # Its state was reset (AlterShareGroupOffsets: a new state epoch) or deleted
            # (DeleteShareGroupOffsets, DeleteGroups): what is held here is stale and the next
            # fetch loads it again, as Kafka drops a fenced share partition.
            del self._partitions[key]
        return error

    def acquired(self) -> None:
        """A fetch acquired records: the lock timer may have an earlier deadline to keep."""
        self._timers_changed.set()

    async def close_session(self, session: ShareSession) -> None:
        """A session closed (epoch -1): its member's records go back for others."""
        keys = [SharePartitionKey(session.group_id, topic_id, partition)
                for topic_id, partition in session.partitions]
        await self._release(keys, session.member_id)

    def connection_closed(self, connection: object) -> None:
        """A client connection closed: the share sessions it opened end, as Kafka 4.3.1 ends
        them, and their members' records are released."""
        for session in self.sessions.remove_opened_on(connection):
            self._background.spawn(f"share-release-{session.group_id}",
                                   self.close_session(session))

    async def _release(self, keys: Iterable[SharePartitionKey], member_id: str) -> None:
        """Release what `member_id` holds; waiting fetches wake only if a start offset moved
        (records archived at the delivery count limit), not for records made available."""
        changed, moved = [], []
        for key in keys:
            share_partition = self._partitions.get(key)
            if share_partition is None:
                continue
            start = share_partition.start_offset
            if share_partition.release_member(member_id):
                changed.append(key)
                if share_partition.start_offset != start:
                    moved.append(key)
        self._wake(moved)
        await asyncio.gather(*(self.write(key) for key in changed))

    async def _run_lock_timers(self) -> None:
        while True:
            deadlines = [d for p in self._partitions.values()
                         if (d := p.next_lock_deadline()) is not None]
            self._timers_changed.clear()
            wait = None if not deadlines else max(0.0, (min(deadlines) - now_ms()) / 1000)
            if wait is None or wait > 0:
                try:
                    async with asyncio.timeout(wait):
                        await self._timers_changed.wait()
                except TimeoutError:
                    pass
                continue
            current = now_ms()
            expired = [key for key, p in self._partitions.items() if p.expire_locks(current)]
            self._wake(expired)
            await asyncio.gather(*(self.write(key) for key in expired))
