"""kgroups: Kafka's consumer-group system (coordinator, __consumer_offsets log, wire-compatible
broker, partition assignors, group member, Spark pipeline) in Python."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`kgroups.serve_in_background` (see kgroups.testing), imported on first use so that
    `import kgroups` does not load the broker."""
    if name == "serve_in_background":
        from kgroups.testing import serve_in_background

        return serve_in_background
    raise AttributeError(f"module 'kgroups' has no attribute {name!r}")
