"""Share sessions (KIP-932): which partitions a member's ShareFetch requests cover, and the
epoch each next request must carry.

Epoch 0 opens a session (replacing the member's old one) with the request's partitions; each
next request carries the epoch after the last, adds its partitions and drops its forgotten
ones; -1 closes the session, and so does the close of the connection that opened it. A
ShareAcknowledge cannot open one. Kafka 4.3.1 answers a missing session
SHARE_SESSION_NOT_FOUND and a wrong epoch INVALID_SHARE_SESSION_EPOCH, as top-level errors,
and does not check that the member belongs to the group.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kgroups.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

TopicPartitionId = tuple[bytes, int]  # (topic id as 16 bytes, partition)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: dict[TopicPartitionId, None] = field(default_factory=dict)  # ordered set
    connection: object = None  # the client connection that opened it: its close ends it


@dataclass(frozen=True, slots=True)
class SessionStep:
    """What a request did to its session: the error to answer, else the session and whether
    the response lists every partition (a session just opened) or only those with news."""

    error: ErrorCode = ErrorCode.NONE
    session: ShareSession | None = None
    full: bool = False
    closing: bool = False


class ShareSessions:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def fetch(self, group_id: str, member_id: str, epoch: int,
              added: Iterable[TopicPartitionId], forgotten: Iterable[TopicPartitionId],
              connection: object = None) -> SessionStep:
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                return SessionStep(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession(group_id, member_id, partitions=dict.fromkeys(added),
                                   connection=connection)
            self._sessions[key] = session
            return SessionStep(session=session, full=True)
        step = self._next(key, epoch)
        if step.session is not None and not step.closing:
            step.session.partitions.update(dict.fromkeys(added))
            for forgotten_partition in forgotten:
                step.session.partitions.pop(forgotten_partition, None)
        return step

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionStep:
        if epoch == INITIAL_EPOCH:
            return SessionStep(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        return self._next((group_id, member_id), epoch)

    def _next(self, key: tuple[str, str], epoch: int) -> SessionStep:
        session = self._sessions.get(key)
        if session is None:
            return SessionStep(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            return SessionStep(session=session, closing=True)
        if epoch != session.next_epoch:
            return SessionStep(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.next_epoch += 1
        return SessionStep(session=session)

    def remove_opened_on(self, connection: object) -> list[ShareSession]:
        """The sessions a closed client connection had opened, removed."""
        gone = [key for key, s in self._sessions.items() if s.connection is connection]
        return [self._sessions.pop(key) for key in gone]
