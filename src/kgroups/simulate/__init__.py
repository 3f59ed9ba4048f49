"""kgroups.simulate: what a rebalance costs, predicted by running the schedule.

Members of `kgroups.member` and the real `GroupCoordinator` run on a virtual clock
(`Simulation`); a `Scenario` says what happens to the members and which `Variant`s (assignor,
protocol, static membership, timeouts) to compare; the `OwnershipLedger` measures the costs.
`kgroups simulate` is the command (docs/simulate.md).
"""

from kgroups.simulate.engine import Outcome, Simulation, simulate
from kgroups.simulate.ledger import OwnershipLedger, Segment
from kgroups.simulate.scenario import DEFAULT_VARIANTS, Action, Event, Scenario, Variant
from kgroups.simulate.scenario_file import ScenarioError, load_scenario, parse_scenario
from kgroups.simulate.templates import TEMPLATES, TemplateSize, template

__all__ = [
    "DEFAULT_VARIANTS",
    "TEMPLATES",
    "Action",
    "Event",
    "Outcome",
    "OwnershipLedger",
    "Scenario",
    "ScenarioError",
    "Segment",
    "Simulation",
    "TemplateSize",
    "Variant",
    "load_scenario",
    "parse_scenario",
    "simulate",
    "template",
]
