"""Partition assignors: range, roundrobin, sticky, cooperative-sticky and uniform.

The leader of a classic consumer group runs one of these over every member's subscription; the
registry maps the strategy names members advertise to the code that runs them. Register a custom
strategy with `register_assignor(name, factory)`.
"""

from kgroups.assignors.interface import (
    PartitionAssignor,
    choose_strategy,
    create_assignor,
    register_assignor,
    registered_names,
)
from kgroups.assignors.model import (
    AssignmentInputError,
    ClusterMetadata,
    MemberSubscription,
    RebalanceProtocol,
)
from kgroups.assignors.range import RangeAssignor
from kgroups.assignors.roundrobin import RoundRobinAssignor
from kgroups.assignors.scenario import assign_scenario
from kgroups.assignors.space import GroupAssignment
from kgroups.assignors.sticky import CooperativeStickyAssignor, StickyAssignor
from kgroups.assignors.uniform import UniformAssignor

for _builtin in (
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    CooperativeStickyAssignor,
    UniformAssignor,
):
    register_assignor(_builtin.name, _builtin)

__all__ = [
    "AssignmentInputError",
    "ClusterMetadata",
    "CooperativeStickyAssignor",
    "GroupAssignment",
    "MemberSubscription",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "UniformAssignor",
    "assign_scenario",
    "choose_strategy",
    "create_assignor",
    "register_assignor",
    "registered_names",
]
