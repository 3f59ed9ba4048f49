"""File descriptors: refuse partitions that would exhaust them, before they do.

Every partition holds a descriptor per segment (its `.log`; kgroups.log.segment), in the broker
process, for as long as the broker runs. A CreateTopics or CreatePartitions that opens more than
the soft `RLIMIT_NOFILE` allows fails half-way, and what then needs a descriptor fails with it:
importing a request's schema, starting a network process, opening a socket pair, rolling a
segment. So the broker refuses, with POLICY_VIOLATION and a message naming the figures, a
creation whose new partitions plus a reserve do not fit under the soft limit beside what is open
already. The reserve (a tenth of the limit, at least `MIN_RESERVE`) is for everything else: a
network process's restart, the segments partitions roll into, connections served in this
process (num.network.threads=0), files opened for a moment.

At start `kgroups serve` raises its soft limit to the hard one (`raise_soft_limit`), as the JVM
does for a Kafka broker (`-XX:+MaxFDLimit`, on by default): a shell's default soft limit of 1024
does not bound a broker whose hard limit allows more.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from pathlib import Path

logger = logging.getLogger("kgroups.descriptors")

DESCRIPTORS_PER_PARTITION = 1  # a new partition's one segment .log (its index is not held)
MIN_RESERVE = 64
_OPEN_DESCRIPTORS = next((Path(p) for p in ("/proc/self/fd", "/dev/fd") if Path(p).is_dir()),
                         None)


def soft_limit() -> int | None:
    """This process's soft RLIMIT_NOFILE; None when unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def open_descriptors(limit: int) -> int | None:
    """How many descriptors this process holds (None where the system does not say); the
    limit itself when not even the one listing them can be opened."""
    if _OPEN_DESCRIPTORS is None:
        return None
    try:
        return len(os.listdir(_OPEN_DESCRIPTORS)) - 1  # less the one listing them
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return limit
        raise


def reserve(limit: int) -> int:
    return max(MIN_RESERVE, limit // 10)


def refusal(new_partitions: int) -> str | None:
    """Why `new_partitions` more partitions may not be created now; None when they fit."""
    limit = soft_limit()
    if limit is None:
        return None
    held = open_descriptors(limit)
    if held is None:
        return None
    needed = new_partitions * DESCRIPTORS_PER_PARTITION
    kept = reserve(limit)
    if held + needed + kept <= limit:
        return None
    return (f"Creating {new_partitions} partition(s) needs {needed} file descriptor(s); the "
            f"broker holds {held} of its limit of {limit} (ulimit -n) and keeps {kept} in "
            f"reserve. Raise the broker's limit, or delete topics.")


def raise_soft_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit, as the JVM does for Kafka (see the module)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or soft == resource.RLIM_INFINITY:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:  # a hard limit above what the kernel allows (macOS)
        logger.info("soft open-file limit stays at %d (hard %d): %s", soft, hard, exc)
