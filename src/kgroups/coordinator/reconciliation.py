"""One reconciliation step of a consumer-protocol member towards its target (Kafka's
CurrentAssignmentBuilder): revoke first, then assign only what no other member still holds.

A member keeps the partitions of its current assignment that are in its target; those it must
give up become `pending_revocation` and it stays at its epoch (UNREVOKED_PARTITIONS) until a
heartbeat's owned partitions no longer list them. Only then does it move to the target epoch
and receive new partitions, and only those no other member holds (the rest wait:
UNRELEASED_PARTITIONS). So no partition is ever assigned to two members at once.

As in Kafka 4.3, the member's subscription bounds the step: a topic it no longer subscribes to
counts as not in its target, and when its subscription has just changed (a new regex not
resolved yet, say) partitions of such topics are taken back at once, without waiting for a new
target.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from kgroups.coordinator.consumer_group import Assignment, ConsumerMember, MemberState

Owned = dict[uuid.UUID, frozenset[int]] | None  # what the member reports holding; None: unchanged


class MemberFencedError(Exception):
    """The member is in a state it cannot be reconciled from: it must rejoin (epoch 0)."""


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    held_by_other: Callable[[uuid.UUID, int], bool],
    owned: Owned,
    subscribed: frozenset[uuid.UUID] | None = None,
    subscription_changed: bool = False,
) -> ConsumerMember:
    """The member after one step (the same object when nothing changes). `subscribed`: the
    ids of the topics the member subscribes to (None: not checked)."""
    if subscribed is not None:
        target = {t: parts for t, parts in target.items() if t in subscribed}
    recheck = subscription_changed and subscribed is not None
    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, held_by_other, owned)
        return _drop_unsubscribed(member, subscribed or frozenset(), owned) if recheck else member
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            if recheck:
                return _drop_unsubscribed(member, subscribed or frozenset(), owned)
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, held_by_other, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, held_by_other, owned)
    if owned is None or owned:
        raise MemberFencedError("The consumer group member is in a unknown state. "
                                "The member must abandon all its partitions and rejoin.")
    return _next(member, target_epoch, target_epoch, target, held_by_other, owned)


def _drop_unsubscribed(
    member: ConsumerMember, subscribed: frozenset[uuid.UUID], owned: Owned
) -> ConsumerMember:
    """Kafka's updateCurrentAssignment: assigned partitions of topics no longer subscribed to
    are to be revoked (UNREVOKED_PARTITIONS while the member still reports them), at the
    member's epoch."""
    dropped = {t: parts for t, parts in member.assigned.items() if t not in subscribed}
    if not dropped:
        return member
    assigned = {t: parts for t, parts in member.assigned.items() if t in subscribed}
    pending = dict(member.pending_revocation)
    for topic_id, parts in dropped.items():
        pending[topic_id] = pending.get(topic_id, frozenset()) | parts
    if _owns_any(owned, pending):
        return _updated(member, MemberState.UNREVOKED_PARTITIONS, member.member_epoch, assigned,
                        pending, {})
    return _updated(member, member.state, member.member_epoch, assigned,
                    member.pending_revocation, {})


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def _next(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    held_by_other: Callable[[uuid.UUID, int], bool],
    owned: Owned,
) -> ConsumerMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    to_assign: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        pending = wanted - kept
        free = frozenset(p for p in pending if not held_by_other(topic_id, p))
        unreleased = unreleased or len(free) != len(pending)
        if kept:
            assigned[topic_id] = kept
        if current - kept:
            revoke[topic_id] = current - kept
        if free:
            to_assign[topic_id] = free
    if revoke and _owns_any(owned, revoke):
        return _updated(member, MemberState.UNREVOKED_PARTITIONS, epoch, assigned, revoke, {})
    for topic_id, parts in to_assign.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    # Newly assigned partitions count from the target epoch; kept ones keep theirs (KIP-1251).
    new = {(t, p): target_epoch for t, parts in to_assign.items() for p in parts}
    return _updated(member, state, target_epoch, assigned, {}, new)


def _updated(
    member: ConsumerMember, state: MemberState, epoch: int, assigned: Assignment,
    revoke: Assignment, new_epochs: dict[tuple[uuid.UUID, int], int],
) -> ConsumerMember:
    held = {(t, p) for a in (assigned, revoke) for t, parts in a.items() for p in parts}
    default = max(member.member_epoch, 0)
    epochs = {key: new_epochs.get(key, member.epochs.get(key, default)) for key in held}
    return replace(
        member, state=state, member_epoch=epoch, previous_member_epoch=member.member_epoch,
        assigned=assigned, pending_revocation=revoke, epochs=epochs,
    )
