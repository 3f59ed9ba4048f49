"""The cyclic garbage collector, set for a long-running broker process.

With Python's defaults (collect the young generation every 700 new container objects) a broker
answering offset commits ran a full collection every half second or so, each 50-67 ms (it walks
every object the process holds: modules, kio's schema classes, the groups), stalling the one
event loop every client shares: commit p99 62-67 ms at p50 7 ms, and 1.6 s of the 12 s a
bench run took, 13% of the broker's CPU (bench/broker.py's commit phase, measured with
gc.callbacks). Freezing what exists once the broker has started (`gc.freeze`: the collector
never walks those objects again; reference counting still frees them) and collecting the young
generation every 20,000 new objects instead of 700 brought that to 60 ms of collections in the
same run and commit p99 to 17-22 ms. The few objects of the start that later become garbage in
a reference cycle stay in memory: a bounded cost, paid once.
"""

from __future__ import annotations

import gc

# New container objects between young collections (Python's default: 700); the older
# generations keep Python's ratios (a middle collection every 10 young ones, and so on).
YOUNG_THRESHOLD = 20_000


def collect_for_serving() -> None:
    """Freeze every object the start made and space the young collections out (the process's
    owner calls it: `kgroups serve` once its broker has started, a network process once it
    listens)."""
    gc.collect()  # what the start left as garbage goes before the rest is frozen
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
