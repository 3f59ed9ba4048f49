"""One reconciliation step of a streams member towards its target (Kafka's streams
CurrentAssignmentBuilder): revoke first, then assign only what no one else still holds.

A member keeps the tasks of its current assignment that are in its target; those it must give up
become pending revocation and it stays at its epoch (UNREVOKED_TASKS) until a heartbeat's owned
tasks no longer list them. Then it moves to the target epoch and receives new tasks, but only
those that are released: an active task while any process still holds it as active (or this
member's process holds it as standby or warm-up), a standby or warm-up task while this member's
process holds it in any role. The rest wait (UNRELEASED_TASKS). So no task is active on two
members at once, and no process holds two roles of one task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kgroups.coordinator.streams_group import (
    EMPTY_TASKS,
    StreamsMember,
    StreamsMemberState,
    Tasks,
    TaskTuple,
)

Task = tuple[str, int]
Holders = Callable[[Task], frozenset[str]]  # the processes holding a task in one role


class StreamsMemberFencedError(Exception):
    """The member is in a state it cannot be reconciled from: it must rejoin (epoch 0)."""


def reconcile(
    member: StreamsMember, target_epoch: int, target: TaskTuple,
    active_holder: Callable[[Task], str | None], standby_holders: Holders,
    warmup_holders: Holders, owned: TaskTuple | None,
) -> StreamsMember:
    """The member after one step (the same object when nothing changes); `owned` is what the
    heartbeat reports holding (None: not reported)."""
    step = _Step(member, target_epoch, target, active_holder, standby_holders, warmup_holders,
                 owned)
    state = member.state
    if state is StreamsMemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return step.next(member.member_epoch)
    if state is StreamsMemberState.UNREVOKED_TASKS:
        if owned is None or owned.contains_any(member.pending_revocation):
            return member
        return step.next(member.member_epoch + 1)
    if state is StreamsMemberState.UNRELEASED_TASKS:
        return step.next(member.member_epoch)
    if owned is None or not owned.is_empty():
        raise StreamsMemberFencedError("The streams group member is in a unknown state. "
                                       "The member must abandon all its tasks and rejoin.")
    return step.next(target_epoch)


class _Step:
    def __init__(self, member: StreamsMember, target_epoch: int, target: TaskTuple,
                 active_holder: Callable[[Task], str | None], standby_holders: Holders,
                 warmup_holders: Holders, owned: TaskTuple | None) -> None:
        self.member = member
        self.target_epoch = target_epoch
        self.target = target
        self.owned = owned
        process = member.process_id

        def held_here(task: Task) -> bool:
            return process in standby_holders(task) or process in warmup_holders(task)

        self.active_unreleased = lambda task: active_holder(task) is not None or held_here(task)
        self.other_unreleased = lambda task: active_holder(task) == process or held_here(task)

    def next(self, epoch: int) -> StreamsMember:
        current, target = self.member.assigned, self.target
        kinds = ((current.active, target.active, self.active_unreleased),
                 (current.standby, target.standby, self.other_unreleased),
                 (current.warmup, target.warmup, self.other_unreleased))
        kept, revoke, new = [], [], []
        unreleased = False
        for mine, wanted, blocked in kinds:
            k, r, n, waiting = _difference(mine, wanted, blocked)
            kept.append(k)
            revoke.append(r)
            new.append(n)
            unreleased = unreleased or waiting
        assigned = TaskTuple(*kept)
        pending = TaskTuple(*revoke)
        to_assign = TaskTuple(*new)
        owned = self.owned
        if not pending.is_empty() and (owned is None or owned.contains_any(pending)):
            return self._updated(StreamsMemberState.UNREVOKED_TASKS, epoch, assigned, pending, {})
        state = (StreamsMemberState.UNRELEASED_TASKS if unreleased
                 else StreamsMemberState.STABLE)
        if to_assign.is_empty():
            return self._updated(state, self.target_epoch, assigned, EMPTY_TASKS, {})
        merged = TaskTuple(*(_union(a, b) for a, b in (
            (assigned.active, to_assign.active), (assigned.standby, to_assign.standby),
            (assigned.warmup, to_assign.warmup))))
        fresh = {(sub, p): self.target_epoch
                 for sub, parts in to_assign.active.items() for p in parts}
        return self._updated(state, self.target_epoch, merged, EMPTY_TASKS, fresh)

    def _updated(self, state: StreamsMemberState, epoch: int, assigned: TaskTuple,
                 pending: TaskTuple, fresh: dict[Task, int]) -> StreamsMember:
        member = self.member
        default = max(member.member_epoch, 0)
        epochs = {(sub, p): fresh.get((sub, p), member.active_epochs.get((sub, p), default))
                  for sub, parts in assigned.active.items() for p in parts}
        # Kafka moves the previous epoch to the current one on every step, and writes the
        # member when anything differs (so a member waiting at an epoch is written once more).
        if (state is member.state and epoch == member.member_epoch
                and member.previous_member_epoch == member.member_epoch
                and assigned == member.assigned and pending == member.pending_revocation
                and epochs == member.active_epochs):
            return member
        return replace(member, state=state, member_epoch=epoch,
                       previous_member_epoch=member.member_epoch, assigned=assigned,
                       pending_revocation=pending, active_epochs=epochs)


def _difference(current: Tasks, target: Tasks, blocked: Callable[[Task], bool]
                ) -> tuple[Tasks, Tasks, Tasks, bool]:
    """(kept, to revoke, to assign now, whether some target task is not released yet)."""
    kept: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    assign: dict[str, frozenset[int]] = {}
    waiting = False
    for sub in set(current) | set(target):
        mine = current.get(sub, frozenset())
        wanted = target.get(sub, frozenset())
        both = mine & wanted
        free = frozenset(p for p in wanted - both if not blocked((sub, p)))
        waiting = waiting or len(free) != len(wanted - both)
        if both:
            kept[sub] = both
        if mine - both:
            revoke[sub] = mine - both
        if free:
            assign[sub] = free
    return kept, revoke, assign, waiting


def _union(a: Tasks, b: Tasks) -> Tasks:
    merged = dict(a)
    for sub, parts in b.items():
        merged[sub] = merged.get(sub, frozenset()) | parts
    return merged
