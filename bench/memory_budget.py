"""RSS of `kgroups serve` under clients that try to make it hold memory (issue 11, item 4).

Scenarios, each against a fresh broker subprocess, with a healthy client making Metadata round
trips throughout:
- fetchers: N clients pipeline Fetch requests of a topic holding data (about 1 MiB per answer)
  and never read;
- longpolls: N clients each send 500 Fetches at the end of a topic that wait up to a minute,
  and never read; 3 s later one producer appends 2 MiB, which wakes them all;
- tricklers: N clients each announce a 100 MiB request frame, send all but its last 64 KiB as
  fast as the broker takes it, then one byte per 200 ms.
Prints the broker's RSS before, at peak (sampled every 5 ms) and after the clients close, and
what the healthy client saw.

Run: .venv/bin/python bench/memory_budget.py [--scenario fetchers|longpolls|tricklers|all]
     [--clients N] [--seconds S] [--override key=value ...] [--verbose]
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
    LongPollFetcher,
    NeverReadingFetcher,
    RssSampler,
    fill_topic,
)

from conftest import ServerProcess

SCENARIOS = ("fetchers", "longpolls", "tricklers")


def _hostile(scenario: str, port: int) -> Hostile:
    if scenario == "fetchers":
        return NeverReadingFetcher(port, topic="t")
    if scenario == "longpolls":
        return LongPollFetcher(port, topic="t", offset=15)
    return FrameTrickler(port)


def run(scenario: str, clients: int, seconds: float, overrides: list[str],
        verbose: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp) / "data", Path(tmp) / "server.log", overrides)
        server.start()
        try:
            if scenario == "fetchers":
                fill_topic(server.port, "t", 8)
            if scenario == "longpolls":
                fill_topic(server.port, "t", 1)  # offsets 0-14; the polls wait at 15
            assert server.process is not None
            sampler = RssSampler(server.process.pid)
            healthy = HealthyClient(server.port).start()
            before = sampler.settled(2.0)
            sampler.start()
            hostile = [_hostile(scenario, server.port) for _ in range(clients)]
            for client in hostile:
                client.start()
            if scenario == "longpolls":
                time.sleep(3)  # until the Fetches wait, then one append wakes them all
                fill_topic(server.port, "t", 2, create=False)
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
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    parser.add_argument("--clients", type=int, default=0,
                        help="default: 4 fetchers or long pollers, 10 tricklers")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--override", action="append", default=[])
    parser.add_argument("--verbose", action="store_true", help="print the broker's log")
    args = parser.parse_args()
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    for scenario in scenarios:
        clients = args.clients or (10 if scenario == "tricklers" else 4)
        run(scenario, clients, args.seconds, args.override, args.verbose)


if __name__ == "__main__":
    main()
