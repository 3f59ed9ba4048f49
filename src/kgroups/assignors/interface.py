"""The assignor interface (Kafka's ConsumerPartitionAssignor in Python form) and the registry.

Members name the assignors they can run, in preference order, in JoinGroup; the coordinator
picks one every member supports and the leader runs it. The registry is how the leader (or a
client adapter) turns that name back into an assignor, built-in or custom.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence

from kgroups.assignors.model import (
    AssignmentInputError,
    ClusterMetadata,
    MemberSubscription,
    RebalanceProtocol,
)
from kgroups.assignors.space import GroupAssignment


class PartitionAssignor(ABC):
    """A partition assignment strategy.

    One instance lives in each member: `subscription_user_data` and `on_assignment` carry that
    member's state between generations (sticky assignors remember what they were given), while
    `assign` runs only on the leader over the whole group.
    """

    name: str = ""
    version: int = 0
    supported_protocols: tuple[RebalanceProtocol, ...] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        """Bytes to put in this member's subscription; None when the strategy needs none."""
        return None

    @abstractmethod
    def assign(
        self, cluster: ClusterMetadata, group_subscription: Sequence[MemberSubscription]
    ) -> GroupAssignment:
        """Decides every member's partitions; every member appears in the result."""

    def on_assignment(  # noqa: B027
        self, assignment: Mapping[str, Sequence[int]], generation: int
    ) -> None:
        """Called in each member with what the leader gave it, before it starts consuming.
        Stateless strategies have nothing to remember, hence the empty default."""


AssignorFactory = Callable[[], PartitionAssignor]

_REGISTRY: dict[str, AssignorFactory] = {}


def register_assignor(name: str, factory: AssignorFactory) -> None:
    """Makes `name` resolvable; a second registration of a name replaces the first, so a user
    can swap a built-in for a patched version without forking kgroups."""
    if not name:
        raise ValueError("an assignor needs a non-empty name")
    _REGISTRY[name] = factory


def registered_names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def create_assignor(name: str) -> PartitionAssignor:
    """A fresh assignor for `name` (fresh: sticky ones keep per-member state)."""
    factory = _REGISTRY.get(name)
    if factory is None:
        known = ", ".join(registered_names())
        raise AssignmentInputError(f"unknown assignment strategy {name!r} (known: {known})")
    return factory()


def choose_strategy(preferences: Iterable[Sequence[str]]) -> str:
    """The strategy the coordinator selects, as Kafka does: among strategies every member
    supports, each member votes for the first one in its own preference list and the most votes
    win (ties go to the name that sorts first, so the choice is deterministic)."""
    lists = [list(p) for p in preferences]
    if not lists:
        raise AssignmentInputError("no members, so no strategy to choose")
    common = set(lists[0]).intersection(*lists[1:])
    if not common:
        raise AssignmentInputError("members share no assignment strategy")
    votes = dict.fromkeys(sorted(common), 0)
    for preference in lists:
        votes[next(name for name in preference if name in common)] += 1
    return max(votes, key=lambda name: votes[name])
