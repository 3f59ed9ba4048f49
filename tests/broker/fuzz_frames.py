"""Valid request frames for every API version kgroups serves, and the mutations a hostile or
buggy client would send, for the fuzz tests and bench/fuzz.py.

A sample request is built from the kio class alone (one element per array, a short value per
string), so every field of every version is present and a new API is covered as soon as it is
registered. Mutations follow the classes of bad input that have crashed or hurt brokers: huge
and negative counts and lengths (as int16, int32 and varint), overlong varints, nulls where a
field is not nullable, truncation, flipped bytes and versions out of range.
"""

from __future__ import annotations

import datetime
import random
import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

from broker_wire_helpers import nested_of, request_of
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
)

from kgroups.broker.apis.contract import HandlerRegistry
from kgroups.broker.broker import install_handlers
from kgroups.broker.wire import build, encode_request, request_type, sibling
from kgroups.errors import ErrorCode
from kgroups.tools.wire_client import KafkaWireClient

_SAMPLES: dict[str, Any] = {
    "bool": False, "int8": 0, "uint8": 0, "int16": 1, "uint16": 1, "int32": 1, "uint32": 1,
    "int64": 1, "uint64": 1, "float64": 0.0, "string": "fz", "bytes": b"fz", "records": b"",
    "uuid": uuid.UUID(int=0), "error_code": KioErrorCode.none,
    "timedelta_i32": datetime.timedelta(milliseconds=1),
    "timedelta_i64": datetime.timedelta(milliseconds=1),
    "datetime_i64": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
}

# Byte patterns written over a frame at every position: each is one class of bad length.
PATTERNS: dict[str, bytes] = {
    "huge varint count": b"\xff\xff\xff\xff\x0f",
    "large varint count": b"\xff\xff\xff\x7f",
    "overlong varint": b"\xff\xff\xff\xff\xff\xff",
    "huge int32 count": struct.pack(">i", 2**31 - 1),
    "large int32 count": struct.pack(">i", 2**27),
    "negative int32": struct.pack(">i", -2),
    "huge int16 length": struct.pack(">h", 2**15 - 1),
    "negative int16": struct.pack(">h", -2),
    "null int32 (-1)": struct.pack(">i", -1),
    "null int16 (-1)": struct.pack(">h", -1),
    "null varint (0)": b"\x00",
}


def served_versions() -> list[tuple[int, int]]:
    """(api key, version) of every request version the broker's handlers register."""
    registry = HandlerRegistry()
    install_handlers(registry)
    return [(h.api_key, v) for h in registry for v in range(h.min_version, h.max_version + 1)]


def sample_value(entity: type[Any]) -> Any:
    """An instance of a kio class with every field set, arrays holding one element."""
    values: dict[str, Any] = {}
    for field in fields(entity):
        kind = classify_field(field)
        if isinstance(kind, EntityField | EntityTupleField):
            one = sample_value(kind.type_)
            values[field.name] = (one,) if isinstance(kind, EntityTupleField) else one
            continue
        one = _SAMPLES[get_schema_field_type(field)]
        values[field.name] = (one,) if isinstance(kind, PrimitiveTupleField) else one
    return entity(**values)


@dataclass(frozen=True, slots=True)
class SampleFrame:
    api_key: int
    version: int
    frame: bytes  # without the size prefix


def sample_frames() -> list[SampleFrame]:
    """One valid frame (no size prefix) per served request version."""
    frames = []
    for api_key, version in served_versions():
        request = sample_value(request_type(api_key, version))
        frames.append(SampleFrame(api_key, version, encode_request(7, "fuzz", request)[4:]))
    return frames


def pattern_mutations(frame: bytes, pattern: bytes) -> Iterator[bytes]:
    """`pattern` written over the frame at every position past the api key (the key picks the
    schema; a wrong one is refused before decoding)."""
    for position in range(2, len(frame)):
        yield frame[:position] + pattern + frame[position + len(pattern):]


def random_mutation(frame: bytes, rng: random.Random) -> bytes:
    """One of the cheap mutations: truncate, flip bits, insert or delete bytes, write a
    pattern, change the version."""
    data = bytearray(frame)
    choice = rng.randrange(6)
    position = rng.randrange(2, len(data)) if len(data) > 2 else 0
    if choice == 0:
        del data[rng.randrange(len(data) + 1):]
    elif choice == 1:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif choice == 2:
        data[position:position] = rng.randbytes(rng.randint(1, 8))
    elif choice == 3:
        del data[position:position + rng.randint(1, 8)]
    elif choice == 4:
        pattern = rng.choice(list(PATTERNS.values()))
        data[position:position + len(pattern)] = pattern
    else:
        struct.pack_into(">h", data, 2, rng.choice((-1, 99, 32767, rng.randrange(20))))
    return bytes(data)


def framed(frame: bytes) -> bytes:
    """The frame with its size prefix, as it goes on the wire."""
    return struct.pack(">i", len(frame)) + frame


class HealthyMember:
    """A well-behaved group member beside the fuzzing: joins, then heartbeats, commits and reads
    its commits back; `problems` lists every error code or wrong answer it met."""

    TOPIC = "healthy-topic"

    def __init__(self, port: int, group: str) -> None:
        self.group = group
        self.problems: list[str] = []
        self.rounds = 0
        self._client = KafkaWireClient("127.0.0.1", port, client_id="healthy", timeout=30)
        create = request_type(19, 7)
        self._client.call(build(create, timeout=datetime.timedelta(seconds=5),
                                validate_only=False, topics=(build(
            sibling(create, "CreatableTopic"), name=self.TOPIC, num_partitions=1,
            replication_factor=1, assignments=(), configs=()),)))
        self._member_id, self._generation = self._join()

    def _join(self) -> tuple[str, int]:
        member_id = ""
        for _ in range(60):  # MEMBER_ID_REQUIRED, then COORDINATOR_LOAD_IN_PROGRESS retries
            join = self._client.call(request_of(
                11, 9, group_id=self.group, session_timeout=datetime.timedelta(seconds=30),
                rebalance_timeout=datetime.timedelta(seconds=30), member_id=member_id,
                group_instance_id=None, protocol_type="consumer", reason=None,
                protocols=(nested_of(11, 9, "JoinGroupRequestProtocol", name="range",
                                   metadata=b""),)))
            if join.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                member_id = join.member_id
            elif join.error_code == ErrorCode.NONE:
                break
            else:
                time.sleep(0.5)
        else:
            raise RuntimeError(f"healthy member could not join: {join.error_code}")
        sync = self._client.call(request_of(
            14, 5, group_id=self.group, generation_id=join.generation_id,
            member_id=join.member_id, group_instance_id=None, protocol_type="consumer",
            protocol_name="range", assignments=(nested_of(
                14, 5, "SyncGroupRequestAssignment", member_id=join.member_id,
                assignment=b""),)))
        if sync.error_code != ErrorCode.NONE:
            raise RuntimeError(f"healthy member could not sync: {sync.error_code}")
        return join.member_id, join.generation_id

    def one_round(self) -> None:
        """Heartbeat, commit offset = round number, read it back."""
        self.rounds += 1
        beat = self._client.call(request_of(
            12, 4, group_id=self.group, generation_id=self._generation,
            member_id=self._member_id, group_instance_id=None))
        if beat.error_code != ErrorCode.NONE:
            self.problems.append(f"heartbeat {beat.error_code}")
        commit = self._client.call(request_of(
            8, 9, group_id=self.group, generation_id_or_member_epoch=self._generation,
            member_id=self._member_id, group_instance_id=None, topics=(nested_of(
                8, 9, "OffsetCommitRequestTopic", name=self.TOPIC, partitions=(nested_of(
                    8, 9, "OffsetCommitRequestPartition", partition_index=0,
                    committed_offset=self.rounds, committed_leader_epoch=-1,
                    committed_metadata=None),)),)))
        code = commit.topics[0].partitions[0].error_code
        if code != ErrorCode.NONE:
            self.problems.append(f"commit {code}")
        fetched = self._client.call(request_of(
            9, 9, require_stable=False, groups=(nested_of(
                9, 9, "OffsetFetchRequestGroup", group_id=self.group, member_id=None,
                member_epoch=-1, topics=None),)))
        offsets = [p.committed_offset for t in fetched.groups[0].topics for p in t.partitions]
        if offsets != [self.rounds]:
            self.problems.append(f"committed {self.rounds}, fetched {offsets}")

    def close(self) -> None:
        self._client.close()


def send_alone(port: int, frame: bytes, wait_s: float = 0.5) -> str:
    """Send one frame on a fresh connection; 'closed' if the broker closed it, 'answered' if a
    response came, 'silent' if neither within `wait_s` (a long poll, or acks=0)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        try:
            sock.sendall(framed(frame))
            head = sock.recv(4)
        except (ConnectionResetError, BrokenPipeError):
            return "closed"
        except TimeoutError:
            return "silent"
    return "answered" if head else "closed"


def send_each(port: int, frames: list[bytes], threads: int = 8) -> Counter[str]:
    """send_alone for every frame, `threads` connections at a time."""
    with ThreadPoolExecutor(threads) as pool:
        return Counter(pool.map(lambda frame: send_alone(port, frame), frames))
