"""`kgroups simulate`: run a schedule under several variants and compare what each costs."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgroups.simulate.engine import Outcome, simulate
from kgroups.simulate.report import as_json, table
from kgroups.simulate.scenario import DEFAULT_VARIANTS, Scenario, Variant
from kgroups.simulate.scenario_file import ScenarioError, load_scenario, variant_from
from kgroups.simulate.templates import TEMPLATES, TemplateSize, template
from kgroups.simulate.timeline import MissingPlotting, write_timeline

if TYPE_CHECKING:
    from kgroups.simulate.from_history import Rebuilt

EXAMPLE = """\
a scenario file (YAML, or the same as JSON; times in seconds unless the name says ms):

  name: restart-one
  duration_s: 600
  topics: {orders: 24}
  members: 6
  measure_from_s: 60
  events:
    - {at_s: 120, action: restart, members: [m0], down_s: 10}
    - {at_s: 300, action: crash, members: [m1]}
  variants:
    - {protocol: eager, assignor: range}
    - {protocol: cooperative, static: true, session_timeout_ms: 30000}
    - {protocol: consumer, assignor: uniform}

actions: join (count), leave, crash (down_s: back after), restart (down_s), pause (for_s),
slow (processing_ms, for_s), network (delay_ms, for_s); pick members with members: [...] or
zone: zN (zones: K spreads members over z0..zK-1). See docs/simulate.md.

a real group's history instead of a file: --from-history DIR|URL --group G rebuilds the
schedule from __consumer_offsets (a kgroups data dir, a Kafka log dir, or a kgroups store's
postgresql:// URL), runs it under the settings the records show ("real-settings") and the
other variants, and prints the history's own costs as the first row ("history").
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="predict what a rebalance costs under other assignors, protocols or timeouts",
        description="Runs members of every variant against kgroups' real group coordinator "
                    "on a virtual clock and prints their costs side by side; the schedule "
                    "comes from a scenario file, a template, or a group's real history "
                    "(--from-history).",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--scenario", metavar="FILE", help="a YAML or JSON scenario file")
    source.add_argument("--template", choices=sorted(TEMPLATES),
                        help="a ready-made schedule, sized by the options below")
    source.add_argument("--from-history", metavar="DIR|URL",
                        help="rebuild the schedule of --group from __consumer_offsets: a "
                             "kgroups data dir or Kafka log dir, or postgresql://... (a store)")
    parser.add_argument("--group", metavar="G", help="--from-history: the group to replay")
    parser.add_argument("--initial-rebalance-delay-ms", type=int, default=3000, metavar="MS",
                        help="--from-history: the broker's group.initial.rebalance.delay.ms, "
                             "which no record holds (3000, Kafka's default)")
    parser.add_argument("--members", type=int, default=6, help="template: members (6)")
    parser.add_argument("--partitions", type=int, default=24, help="template: partitions (24)")
    parser.add_argument("--down-s", type=float, default=20.0,
                        help="template: how long a member stays away (20)")
    parser.add_argument("--gap-s", type=float, default=30.0,
                        help="template: seconds between steps (30)")
    parser.add_argument("--seed", type=int, help="the random seed (the file's, or 0)")
    parser.add_argument(
        "--variant", action="append", metavar="K=V,...",
        help="a variant to run instead of the file's or the default four, e.g. "
             "protocol=cooperative,static=true,session_timeout_ms=30000 (repeatable)")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument("--timeline", metavar="PNG",
                        help="also draw partition ownership over time per variant")
    parser.set_defaults(run=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    rebuilt = None
    try:
        if args.from_history:
            rebuilt = _rebuilt(args)
            scenario = rebuilt.scenario
        else:
            scenario = _scenario(args)
    except ScenarioError as error:
        return _fail(str(error))
    outcomes: list[Outcome] = [] if rebuilt is None else [rebuilt.history]
    outcomes += [simulate(scenario, v, keep_segments=bool(args.timeline))
                 for v in scenario.variants]
    if rebuilt is not None:  # --from-history: the pipeline is there (_rebuilt checked)
        from kgroups.simulate.from_history import history_json, history_text
    if args.output == "json":
        extra = None if rebuilt is None else {"from_history": history_json(rebuilt)}
        json.dump(as_json(scenario, outcomes, extra), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(table(scenario, outcomes))
        if rebuilt is not None:
            print(history_text(rebuilt))
    if args.timeline:
        try:
            write_timeline(outcomes, Path(args.timeline))
        except MissingPlotting as error:
            return _fail(str(error))
        except OSError as error:
            return _fail(f"cannot write {args.timeline}: {error.strerror}")
    return 0


def _rebuilt(args: argparse.Namespace) -> Rebuilt:
    """The schedule and the history row of --from-history. The pipeline reads the history
    (pyarrow, the `spark` extra): imported here, so that a broker-only install runs
    `kgroups` (and `simulate` from files) without it."""
    if not args.group:
        raise ScenarioError("--from-history needs --group G")
    if args.initial_rebalance_delay_ms < 0:
        raise ScenarioError("--initial-rebalance-delay-ms must be >= 0")
    if importlib.util.find_spec("pyarrow") is None:
        raise ScenarioError("--from-history reads the history with the pipeline, which needs "
                            "the spark extra: pip install 'kgroups[spark]'")
    from kgroups.simulate.from_history import rebuild
    from kgroups.simulate.history_read import HistoryError, read_history

    variants = _variants(args.variant) if args.variant else DEFAULT_VARIANTS
    try:
        rebuilt = rebuild(read_history(args.from_history, args.group), variants,
                          args.initial_rebalance_delay_ms)
    except HistoryError as error:
        raise ScenarioError(str(error)) from None
    if args.seed is not None:
        rebuilt = replace(rebuilt, scenario=replace(rebuilt.scenario, seed=args.seed))
    return rebuilt


def _scenario(args: argparse.Namespace) -> Scenario:
    variants = _variants(args.variant) if args.variant else None
    if args.scenario:
        scenario = load_scenario(args.scenario)
        if args.seed is not None:
            scenario = replace(scenario, seed=args.seed)
        return replace(scenario, variants=variants) if variants else scenario
    if args.members < 1 or args.partitions < 1 or args.down_s < 0 or args.gap_s < 0:
        raise ScenarioError("--members and --partitions must be >= 1, --down-s and --gap-s >= 0")
    size = TemplateSize(args.members, args.partitions, args.down_s, args.gap_s, args.seed or 0)
    return template(args.template, size, variants or DEFAULT_VARIANTS)


def _variants(specs: list[str]) -> tuple[Variant, ...]:
    variants = []
    for spec in specs:
        settings: dict[str, str] = {}
        for item in filter(None, spec.split(",")):
            key, sep, value = item.partition("=")
            if not sep:
                raise ScenarioError(f"--variant {spec!r}: {item!r} is not key=value")
            settings[key.strip()] = value.strip()
        known = set(Variant.__dataclass_fields__)
        for key in settings:
            if key not in known:
                raise ScenarioError(f"--variant {spec!r}: unknown setting {key!r} (known: "
                                    f"{', '.join(sorted(known))})")

        def fail(key: str, message: str, spec: str = spec) -> ScenarioError:
            return ScenarioError(f"--variant {spec!r}: {message}")

        variants.append(variant_from(settings, fail))
    return tuple(variants)


def _fail(message: str) -> int:
    print(f"kgroups simulate: {message}", file=sys.stderr)
    return 1
