"""The coordinator follows the broker's topics by id from start-up on: a topic whose
partition.metadata cannot be read is left out of consumer groups' view (with a warning) instead
of stopping `kgroups serve`, and the other topics are served to consumer-protocol members."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from broker_wire_helpers import connect, create_topic
from tests.broker.servers import ServerProcess

from kgroups.broker.wire import build, request_type
from kgroups.errors import ErrorCode


def test_unreadable_topic_id_is_left_out_and_serve_starts(tmp_path: Path) -> None:
    damaged = tmp_path / "data" / "broken-0"
    damaged.mkdir(parents=True)
    (damaged / "partition.metadata").write_text("not a partition.metadata file\n")
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log", ())
    server.start()
    try:
        assert "topic_id_unavailable" in server.log_text()
        with connect(server.port) as client:
            create_topic(client, "fine", 2)
            deadline = time.monotonic() + 60
            # A consumer retries while the group's __consumer_offsets partition still loads
            # (on a busy machine it may not have been loaded yet when serve started listening).
            while int((answer := client.call(build(
                    request_type(68, 1), group_id="g", member_id="m1", member_epoch=0,
                    instance_id=None, rack_id=None,
                    rebalance_timeout=datetime.timedelta(seconds=30),
                    subscribed_topic_names=("fine",), subscribed_topic_regex=None,
                    server_assignor=None, topic_partitions=()))).error_code) \
                    == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                assert time.monotonic() < deadline, "the coordinator never finished loading"
                time.sleep(0.1)
        assert int(answer.error_code) == 0
        assert sorted(p for t in answer.assignment.topic_partitions for p in t.partitions) \
            == [0, 1]
    finally:
        server.close()
