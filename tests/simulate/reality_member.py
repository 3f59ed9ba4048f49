"""One real librdkafka consumer (confluent-kafka) in a process of its own, for
tests/simulate/test_reality.py: a process so that a crash can be a real SIGKILL (no LeaveGroup,
no callback, the heartbeats simply stop), as it would be in production.

    python reality_member.py '{"name": "m0", "config": {...librdkafka settings...},
                               "topic": "t"}'

It prints one JSON line per thing that happened, with `time.monotonic()` (the same clock in
every process of the machine): `ready` once it knows the topic's metadata and has had time to
find the group coordinator, `started` when it subscribes (on a line `subscribe` on stdin),
`assign` / `revoke` / `lost` with the partitions each callback was given, `closing` when a line
`close` arrives, `closed`. Warming up first makes its JoinGroup go out within milliseconds of
`started`, so the moment the simulator is told the member starts is the moment it joins. It
polls every 20 ms (what a consumer with little to process does).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition


def _say(event: str, partitions: list[TopicPartition] | None = None) -> None:
    line: dict[str, Any] = {"t": time.monotonic(), "event": event}
    if partitions is not None:
        line["partitions"] = sorted(p.partition for p in partitions)
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> None:
    spec = json.loads(sys.argv[1])
    errors: list[str] = []
    consumer = Consumer({**spec["config"], "error_cb": lambda e: errors.append(str(e))})
    subscribe, close = threading.Event(), threading.Event()

    def read_commands() -> None:
        for line in sys.stdin:
            if line.strip() == "subscribe":
                subscribe.set()
            elif line.strip() == "close":
                break
        close.set()

    consumer.list_topics(spec["topic"], timeout=30)
    consumer.poll(0.3)  # the coordinator lookup starts with the consumer, not the subscription
    threading.Thread(target=read_commands, daemon=True).start()
    _say("ready")
    subscribe.wait()
    consumer.subscribe(
        [spec["topic"]],
        on_assign=lambda _c, parts: _say("assign", parts),
        on_revoke=lambda _c, parts: _say("revoke", parts),
        on_lost=lambda _c, parts: _say("lost", parts),
    )
    _say("started")
    while not close.is_set():
        consumer.poll(0.02)
    _say("closing")
    consumer.close()
    _say("closed")


if __name__ == "__main__":
    main()
