"""Hostile request frames: no length, count or null in a request may take the broker down.

The classes of bad lengths are swept exhaustively (every served request version, every byte
position) through the decoder in a child process, since the failure they guard against aborts
the process it happens in; then a live `kgroups serve` takes the same classes and a
hypothesis-driven stream of random mutations while a healthy group keeps working beside them.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil
import pytest
from broker_wire_helpers import connect, is_closed_by_peer, metadata_request, raw_socket
from fuzz_frames import (
    PATTERNS,
    HealthyMember,
    pattern_mutations,
    random_mutation,
    sample_frames,
    sample_value,
    send_each,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.broker.servers import ServerProcess

from kgroups.broker.wire import FrameDecodeError, decode_request, encode_request, request_type

HERE = Path(__file__).parent
THE_24_BYTE_FRAME = bytes.fromhex("000000140003000c00000007000466757a7a00ffffffff0f")
LIVE_FUZZ_FRAMES = 20_000
FRAMES_PER_EXAMPLE = 50
# The fuzzing may grow the broker by this much at most (caches of decoders, connection churn).
RSS_ALLOWANCE_BYTES = 150 * 1024 * 1024


def _decode_in_child(*args: str) -> Counter[str]:
    child = subprocess.run([sys.executable, str(HERE / "decode_mutations.py"), *args],
                           capture_output=True, text=True, timeout=300, cwd=HERE)
    assert child.returncode == 0, f"decoder died ({child.returncode}):\n{child.stderr[-2000:]}"
    return Counter(json.loads(child.stdout))


@pytest.mark.parametrize("mutation_class", [*PATTERNS, "random"])
def test_decoder_survives_every_mutation_class(mutation_class: str) -> None:
    outcomes = _decode_in_child(mutation_class, "11", "20000")
    assert not [o for o in outcomes if o.startswith("unexpected")], outcomes
    assert outcomes["malformed"] > 0  # the class really produced frames the check refuses


def test_null_where_not_nullable_is_refused_before_a_handler_sees_it() -> None:
    """OffsetCommit v9 with a null topics array: Kafka's reader throws, the connection closes;
    it used to reach the handler and raise a TypeError there."""
    commit = dataclasses.replace(sample_value(request_type(8, 9)), topics=None)
    nulled = encode_request(1, "fuzz", commit)[4:]
    with pytest.raises(FrameDecodeError, match="non-nullable array topics is null"):
        decode_request(nulled)


def test_sample_frames_cover_every_served_version_and_decode_whole() -> None:
    samples = sample_frames()
    assert {(s.api_key, s.version) for s in samples} >= {(3, 12), (8, 9), (11, 9), (0, 9)}
    for sample in samples:
        assert decode_request(sample.frame).unused_bytes == 0


@pytest.fixture
def fuzzed_server(start_kgroups_server) -> ServerProcess:  # type: ignore[no-untyped-def]
    server: ServerProcess = start_kgroups_server("group.initial.rebalance.delay.ms=0")
    return server


def _rss(server: ServerProcess) -> int:
    assert server.process is not None
    return int(psutil.Process(server.process.pid).memory_info().rss)


def _assert_alive_and_serving(server: ServerProcess) -> None:
    assert server.process is not None and server.process.poll() is None, server.log_text()[-3000:]
    with connect(server.port) as client:
        assert client.call(metadata_request(all_topics=True)).brokers[0].port == server.port
    # A request that decodes gets an answer from its handler, never an exception (Kafka maps
    # every such request to an error code).
    assert "handler_failed" not in server.log_text()


@pytest.mark.interop
def test_the_24_byte_frame_closes_its_connection_only(fuzzed_server: ServerProcess) -> None:
    with connect(fuzzed_server.port) as bystander, raw_socket(fuzzed_server.port) as sock:
        sock.sendall(THE_24_BYTE_FRAME)
        assert is_closed_by_peer(sock)
        assert bystander.call(metadata_request(all_topics=True)).brokers
    _assert_alive_and_serving(fuzzed_server)
    closes = [line for line in fuzzed_server.log_text().splitlines()
              if "connection_closed" in line and "malformed_request" in line]
    assert len(closes) == 1 and "array topics" in closes[0]


@pytest.mark.interop
def test_every_length_class_at_every_position_leaves_the_broker_serving(
    fuzzed_server: ServerProcess,
) -> None:
    """Each class of bad length written at every byte of the newest version of every API."""
    newest = {s.api_key: s for s in sample_frames()}
    frames = [mutated for pattern in PATTERNS.values() for sample in newest.values()
              for mutated in pattern_mutations(sample.frame, pattern)]
    healthy = HealthyMember(fuzzed_server.port, "healthy-classes")
    before = _rss(fuzzed_server)
    outcomes = send_each(fuzzed_server.port, frames)
    healthy.one_round()
    assert outcomes["closed"] > len(frames) // 2, outcomes
    assert healthy.problems == []
    _assert_alive_and_serving(fuzzed_server)
    assert _rss(fuzzed_server) < before + RSS_ALLOWANCE_BYTES
    healthy.close()


@pytest.mark.interop
def test_hypothesis_mutations_leave_a_healthy_group_unaffected(
    fuzzed_server: ServerProcess,
) -> None:
    samples = [s.frame for s in sample_frames()]
    healthy = HealthyMember(fuzzed_server.port, "healthy-fuzz")
    before = _rss(fuzzed_server)
    sent: Counter[str] = Counter()

    @settings(max_examples=LIVE_FUZZ_FRAMES // FRAMES_PER_EXAMPLE, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, len(samples) - 1), st.integers(0, 2**32)),
                    min_size=FRAMES_PER_EXAMPLE, max_size=FRAMES_PER_EXAMPLE))
    def fuzz(picks: list[tuple[int, int]]) -> None:
        frames = [random_mutation(samples[index], random.Random(seed)) for index, seed in picks]
        sent.update(send_each(fuzzed_server.port, frames))
        healthy.one_round()
        assert fuzzed_server.process is not None and fuzzed_server.process.poll() is None

    fuzz()
    assert sum(sent.values()) >= LIVE_FUZZ_FRAMES
    assert sent["closed"] > 0 and sent["answered"] > 0, sent
    assert healthy.problems == [] and healthy.rounds >= LIVE_FUZZ_FRAMES // FRAMES_PER_EXAMPLE
    _assert_alive_and_serving(fuzzed_server)
    assert _rss(fuzzed_server) < before + RSS_ALLOWANCE_BYTES
    healthy.close()
