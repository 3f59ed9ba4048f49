"""The asyncio driver: `kgroups.member` state machines against a real broker.

The simulator (kgroups.simulate.engine) drives the same members against the coordinator core on
a virtual clock; this driver passes them the event loop's clock (milliseconds since the
generator started), sends what they queue over their own connection to the group's coordinator
(`to_wire`), hands them the answers (`from_wire`), and wakes each at its `next_deadline` with
one timer handle of the event loop. A member costs a connection, a few objects and a timer, so
thousands fit in one process (raise the open-file limit: one socket per member).

A member whose connection is lost stops, its failure recorded with the connection's error, and
`wait_stable` raises at once naming it: a load run against a broker that went away ends with
the reason, it does not wait for answers that cannot come.
"""

from __future__ import annotations

import asyncio
import base64
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from kgroups.assignors import ClusterMetadata
from kgroups.coordinator import OffsetCommitResponse
from kgroups.coordinator.consumer_messages import ConsumerGroupHeartbeatResponse
from kgroups.loadgen.bootstrap import GroupHome, consumer_group_epochs, locate_group
from kgroups.loadgen.connection import BrokerConnection, ConnectionLost
from kgroups.loadgen.tally import Tally
from kgroups.loadgen.wire_messages import answer_error, api_name, from_wire, to_wire
from kgroups.member import (
    ClassicMember,
    ClassicState,
    ConsumerMember,
    ConsumerState,
    MemberRequest,
    MemberSettings,
    Protocol,
)

Member = ClassicMember | ConsumerMember
# How long a closing member waits for its last commit and LeaveGroup to be answered.
CLOSE_WAIT_S = 5.0
# How often `wait_stable` asks the coordinator whether it agrees (a description of every member
# of a large group is not free).
DESCRIBE_EVERY_S = 1.0


class LoadError(RuntimeError):
    """The group did not become Stable: members failed, or time ran out."""


@dataclass(slots=True, eq=False)
class Running:
    """One member with its connection and its wake-up."""

    name: str
    member: Member
    connection: BrokerConnection
    wake: asyncio.TimerHandle | None = None
    wake_at: int | None = None
    in_flight: set[asyncio.Future[Any]] = field(default_factory=set)


def java_member_id() -> str:
    """A member id as Kafka 4 clients pick one for the consumer protocol (a random UUID in
    Kafka's base64 form)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LoadGenerator:
    def __init__(self, home: GroupHome, settings: MemberSettings,
                 client_id: str = "kgroups-loadgen") -> None:
        self.home = home
        self.settings = settings
        self.client_id = client_id
        self.tally = Tally()
        self.members: dict[str, Running] = {}
        self._cluster = ClusterMetadata(dict(home.partitions))
        self._partitions = frozenset((topic, p) for topic, count in home.partitions.items()
                                     for p in range(count))
        self._loop = asyncio.get_running_loop()
        self._origin = self._loop.time()
        self._started = 0

    @classmethod
    async def connect(cls, host: str, port: int, settings: MemberSettings,
                      timeout_s: float = 30.0) -> LoadGenerator:
        """Learn the group's coordinator and topics from the bootstrap broker."""
        home = await locate_group(host, port, settings.group_id, settings.topics,
                                  "kgroups-loadgen", timeout_s)
        if settings.protocol is Protocol.CONSUMER and home.versions.consumer_group_heartbeat \
                is None:
            raise LoadError(f"{host}:{port} does not speak ConsumerGroupHeartbeat")
        return cls(home, settings)

    @property
    def partitions(self) -> frozenset[tuple[str, int]]:
        return self._partitions

    def now(self) -> int:
        return int((self._loop.time() - self._origin) * 1000)

    # -- members coming and going -------------------------------------------------------------

    async def start_members(self, count: int, concurrency: int = 256) -> list[str]:
        """Open `count` more members' connections (`concurrency` at a time), each member
        starting as soon as its connection is up."""
        names = [f"m{index:05d}" for index in range(self._started, self._started + count)]
        self._started += count
        gate = asyncio.Semaphore(concurrency)

        async def start(name: str) -> None:
            async with gate:
                await self._start(name)

        await asyncio.gather(*(start(name) for name in names))
        return names

    async def _start(self, name: str) -> None:
        try:
            connection = await BrokerConnection.open(
                self.home.coordinator_host, self.home.coordinator_port, self.client_id)
        except ConnectionLost as exc:
            self.tally.failures[name] = str(exc)
            return
        member: Member
        if self.settings.protocol is Protocol.CONSUMER:
            member = ConsumerMember(name, self.settings, java_member_id(), self.home.topic_ids,
                                    self.now())
        else:
            member = ClassicMember(name, self.settings, self._cluster, self.now())
        running = Running(name, member, connection)
        connection.on_lost = lambda error: self._lose(running, error)
        self.members[name] = running
        self._pump(running)

    async def close_member(self, name: str) -> None:
        """A clean shutdown of one member: its commit and LeaveGroup go out (a static member's
        none), then its connection closes once they are answered."""
        running = self.members.pop(name)
        running.member.close(self.now())
        self._pump(running)
        if running.in_flight:
            await asyncio.wait(running.in_flight, timeout=CLOSE_WAIT_S)
        await self._drop(running)

    async def shutdown(self) -> None:
        """Every member's connection closes without a word, as when the processes are killed."""
        running = list(self.members.values())
        self.members.clear()
        for each in running:
            each.member.crash()
        await asyncio.gather(*(self._drop(each) for each in running))

    async def _drop(self, running: Running) -> None:
        if running.wake is not None:
            running.wake.cancel()
            running.wake = None
        await running.connection.close()

    # -- the member's requests out, answers in, wake-ups ---------------------------------------

    def _pump(self, running: Running) -> None:
        """Send what the member queued and wake it at its next deadline."""
        member = running.member
        for request in member.take_requests():
            self._send(running, request)
        if member.failure is not None:
            self.tally.failures[running.name] = member.failure
        now = self.now()
        deadline = member.next_deadline(now)
        if deadline == running.wake_at and running.wake is not None:
            return
        if running.wake is not None:
            running.wake.cancel()
            running.wake = None
        running.wake_at = deadline
        if deadline is not None:
            running.wake = self._loop.call_at(self._origin + deadline / 1000, self._wake,
                                              running)

    def _send(self, running: Running, request: MemberRequest) -> None:
        api = api_name(request)
        self.tally.sent[api] += 1
        future = running.connection.send(to_wire(request, self.home.versions))
        running.in_flight.add(future)
        future.add_done_callback(lambda done: self._answered(running, request, api, done))

    def _answered(self, running: Running, request: MemberRequest, api: str,
                  done: asyncio.Future[Any]) -> None:
        running.in_flight.discard(done)
        error = done.exception()
        if error is not None:
            self._lose(running, error)
            return
        response = from_wire(request, done.result())
        self.tally.answer(api, answer_error(response))
        if self.members.get(running.name) is not running:
            return
        member = running.member
        # Each member only ever sends the requests of its own protocol, so it only gets their
        # answers.
        if isinstance(member, ConsumerMember):
            assert isinstance(response, ConsumerGroupHeartbeatResponse | OffsetCommitResponse)
            member.on_response(response, self.now())
        else:
            assert not isinstance(response, ConsumerGroupHeartbeatResponse)
            member.on_response(response, self.now())
        self._pump(running)

    def _lose(self, running: Running, error: BaseException) -> None:
        """The connection is gone: the member stops, and says why."""
        if self.members.get(running.name) is not running:
            return
        self.tally.failures.setdefault(running.name, str(error))
        running.member.crash()
        if running.wake is not None:
            running.wake.cancel()
            running.wake = None

    def _wake(self, running: Running) -> None:
        running.wake = None
        running.wake_at = None
        running.member.advance(self.now())
        self._pump(running)

    # -- when the group is Stable ---------------------------------------------------------------

    def owners(self) -> dict[tuple[str, int], list[str]]:
        """Each partition's current owners by member name (more than one: a fault)."""
        owners: dict[tuple[str, int], list[str]] = {}
        for name, running in self.members.items():
            for partition in running.member.owned:
                owners.setdefault(partition, []).append(name)
        return owners

    def stable(self) -> bool:
        """Every member holds its assignment of one generation (classic) or one assignment
        epoch (consumer protocol), and every partition is owned exactly once."""
        if not self.members:
            return False
        rounds = set()
        owned = 0
        for running in self.members.values():
            member = running.member
            if isinstance(member, ClassicMember):
                if member.state is not ClassicState.STABLE:
                    return False
                rounds.add(member.generation)
            else:
                if member.state is not ConsumerState.MEMBER:
                    return False
                rounds.add(member.epoch)
            if len(rounds) > 1:
                return False
            owned += len(member.owned)
        return owned == len(self._partitions) and len(self.owners()) == len(self._partitions)

    async def wait_stable(self, timeout_s: float, check_every_s: float = 0.05) -> None:
        """Return once `stable()` and, for the consumer protocol, the coordinator agrees (it
        says Stable, with the members' epoch as its group and assignment epoch); LoadError as
        soon as a member has failed, or at timeout."""
        deadline = self._loop.time() + timeout_s
        observer: BrokerConnection | None = None
        asked_at = -math.inf
        try:
            while True:
                self._raise_on_failure()
                if self.stable() and self._loop.time() >= asked_at + DESCRIBE_EVERY_S:
                    asked_at = self._loop.time()
                    if self.settings.protocol is not Protocol.CONSUMER:
                        return
                    if observer is None:
                        observer = await BrokerConnection.open(
                            self.home.coordinator_host, self.home.coordinator_port,
                            self.client_id)
                    if await self._coordinator_agrees(observer):
                        return
                if self._loop.time() > deadline:
                    raise LoadError(f"not Stable after {timeout_s:g} s: {self.describe()}")
                await asyncio.sleep(check_every_s)
        finally:
            if observer is not None:
                await observer.close()

    async def _coordinator_agrees(self, observer: BrokerConnection) -> bool:
        version = self.home.versions.consumer_group_describe
        if version is None:  # a broker without ConsumerGroupDescribe: the members' word
            return True
        member = next(iter(self.members.values())).member
        assert isinstance(member, ConsumerMember)  # stable(): they all share this epoch
        epoch = member.epoch
        state, group_epoch, assignment_epoch = await consumer_group_epochs(
            observer, version, self.settings.group_id)
        return state == "Stable" and group_epoch == assignment_epoch == epoch

    async def hold(self, seconds: float, check_every_s: float = 0.05) -> None:
        """Let the members run for `seconds`; LoadError as soon as one has failed."""
        deadline = self._loop.time() + seconds
        while self._loop.time() < deadline:
            self._raise_on_failure()
            await asyncio.sleep(min(check_every_s, max(0.0, deadline - self._loop.time())))
        self._raise_on_failure()

    def _raise_on_failure(self) -> None:
        if self.tally.failures:
            name, why = next(iter(self.tally.failures.items()))
            raise LoadError(f"{len(self.tally.failures)} members stopped; {name}: {why}")

    def describe(self) -> str:
        """Members by state, and how many partitions are owned, for a message."""
        states: dict[str, int] = {}
        for running in self.members.values():
            state = running.member.state.value
            states[state] = states.get(state, 0) + 1
        owned = len(self.owners())
        return (", ".join(f"{count} {state}" for state, count in sorted(states.items()))
                + f"; {owned}/{len(self._partitions)} partitions owned")
