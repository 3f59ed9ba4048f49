"""RSS of `kgroups serve` under clients that try to make it hold memory (issue 11, item 4).

Scenarios, each against a fresh broker subprocess, with a healthy client making Metadata round
trips throughout:
- fetchers: N clients pipeline Fetch requests of a topic holding data (about 1 MiB per answer)
  and never read;
- tricklers: N clients each announce a 100 MiB request frame, send all but its last byte as fast
  as the broker takes it, then trickle.
Prints the broker's RSS before, at peak (sampled every 5 ms) and after the clients close, and
what the healthy client saw.

Run: .venv/bin/python bench/memory_budget.py [--scenario fetchers|tricklers|both]
     [--clients N] [--seconds S] [--override key=value ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "broker"))

from memory_pressure import (
    MIB,
    FrameTrickler,
    HealthyClient,
    Hostile,
    NeverReadingFetcher,
    RssSampler,
    fill_topic,
)

from conftest import ServerProcess


def run(scenario: str, clients: int, seconds: float, overrides: list[str],
        verbose: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp) / "data", Path(tmp) / "server.log", overrides)
        server.start()
        try:
            if scenario == "fetchers":
                fill_topic(server.port, "t", 8)
            assert server.process is not None
            sampler = RssSampler(server.process.pid)
            healthy = HealthyClient(server.port).start()
            before = sampler.settled(2.0)
            sampler.start()
            hostile: list[Hostile] = [
                NeverReadingFetcher(server.port, topic="t") if scenario == "fetchers"
                else FrameTrickler(server.port) for _ in range(clients)]
            for client in hostile:
                client.start()
            time.sleep(seconds)
            closed = sum(client.closed_by_broker for client in hostile)
            for client in hostile:
                client.close()
            healthy.close()
            peak = sampler.close()
            after = sampler.settled(3.0)
        finally:
            server.stop()
            server.close()
        log = server.log_text()
        closes = log.count("reason=memory_budget")
        if verbose:
            print(log)
        print(f"{scenario}: {clients} clients for {seconds:.0f} s, overrides {overrides or '-'}")
        print(f"  RSS before {before / MIB:.1f} MiB, peak {peak / MIB:.1f} MiB "
              f"(+{(peak - before) / MIB:.1f}), after {after / MIB:.1f} MiB "
              f"({(after - before) / before:+.1%})")
        sent = sum(c.sent for c in hostile) / MIB
        print(f"  hostile clients closed by the broker: {closed} of {clients} seen by them, "
              f"{closes} reason=memory_budget lines logged; they sent {sent:.0f} MiB")
        print(f"  healthy client: {healthy.calls} round trips, {healthy.failures} failures, "
              f"slowest {healthy.worst * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("fetchers", "tricklers", "both"), default="both")
    parser.add_argument("--clients", type=int, default=0, help="default: 4 fetchers, 10 tricklers")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--override", action="append", default=[])
    parser.add_argument("--verbose", action="store_true", help="print the broker's log")
    args = parser.parse_args()
    scenarios = ("fetchers", "tricklers") if args.scenario == "both" else (args.scenario,)
    for scenario in scenarios:
        clients = args.clients or (4 if scenario == "fetchers" else 10)
        run(scenario, clients, args.seconds, args.override, args.verbose)


if __name__ == "__main__":
    main()
