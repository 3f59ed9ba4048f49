"""How fast `kgroups simulate` runs: virtual seconds simulated per CPU second, for groups of
100 and 1,000 members over an hour of virtual time (issue 27).

The schedule: the group forms, then one member is restarted every six minutes (back after
10 s; ten restarts in the hour), two partitions per member, Java-like defaults (heartbeats
every 3 s, auto-commit every 5 s). Most of the hour is the group's steady state: every
heartbeat and commit of every member goes through the real coordinator. Each variant runs
once; the CPU time is the process's (time.process_time), so other load on the machine does
not count.

Run: .venv/bin/python bench/simulate.py [--members 100,1000] [--hours 1] [--variants all]
"""

from __future__ import annotations

import argparse
import time

from kgroups.simulate import DEFAULT_VARIANTS, Action, Event, Scenario, simulate


def rolling_hour(members: int, hours: float) -> Scenario:
    duration = int(hours * 3_600_000)
    names = tuple(f"m{i}" for i in range(members))
    step = duration // 10
    events = tuple(Event(60_000 + i * step, Action.RESTART, (names[i * 7 % members],),
                         down_ms=10_000) for i in range(10))
    return Scenario(f"rolling-{members}", duration, {"t": 2 * members}, names,
                    {n: "z0" for n in names}, events, measure_from_ms=60_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="100,1000")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--variants", default="all",
                        help="comma-separated default variant names, or all")
    args = parser.parse_args()
    chosen = [v for v in DEFAULT_VARIANTS
              if args.variants == "all" or v.name in args.variants.split(",")]
    print(f"{'members':>7}  {'variant':<20} {'virtual s':>9}  {'CPU s':>7}  "
          f"{'virtual s / CPU s':>17}  {'events':>9}")
    for members in (int(m) for m in args.members.split(",")):
        scenario = rolling_hour(members, args.hours)
        for variant in chosen:
            started = time.process_time()
            outcome = simulate(scenario, variant)
            cpu = time.process_time() - started
            virtual = scenario.duration_ms / 1000
            print(f"{members:>7}  {variant.name:<20} {virtual:>9.0f}  {cpu:>7.1f}  "
                  f"{virtual / cpu:>17.0f}  {outcome.events_processed:>9}", flush=True)


if __name__ == "__main__":
    main()
