"""`kgroups serve` sets the garbage collector for serving (`gc_tuning`): thousands of offset
commits make no full collection, the 50-70 ms stall that set commit p99 with Python's
defaults; the broker's metrics show its collections by generation."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families
from tests.broker.broker_wire_helpers import (
    await_commits,
    commit_errors,
    connect,
    create_topic,
    standalone_commits,
)
from tests.broker.servers import ServerProcess

from kgroups.errors import ErrorCode

GROUP = "gc-tuning"
TOPIC = "committed"
COMMITS = 40
# Of COMMITS pipelined commits: 16,000, which made a full collection every ~4,000 with Python's
# defaults (and young ones every few commits).
ROUNDS = 400


def _collections(metrics_port: int) -> dict[str, float]:
    """python_gc_collections_total by generation."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as got:
        text = got.read().decode()
    return {sample.labels["generation"]: sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "python_gc_collections"
            for sample in family.samples}


def test_thousands_of_commits_make_no_full_collection(
    start_kgroups_server: Callable[..., ServerProcess],
) -> None:
    server = start_kgroups_server("kgroups.metrics.port=0")
    assert server.process is not None and server.process.stdout is not None
    line = server.process.stdout.readline().decode()
    assert line.startswith("metrics "), line
    metrics_port = int(line.rsplit(":", 1)[1])
    with connect(server.port) as admin:
        assert create_topic(admin, TOPIC, 1).error_code == ErrorCode.NONE
    await_commits(server.port, [GROUP], TOPIC)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        before = _collections(metrics_port)
        for round_ in range(ROUNDS):
            sock.sendall(standalone_commits([GROUP] * COMMITS, TOPIC,
                                            first_offset=round_ * COMMITS))
            assert commit_errors(sock, COMMITS) == [ErrorCode.NONE] * COMMITS
        after = _collections(metrics_port)
    assert after["2"] == before["2"], (before, after)
