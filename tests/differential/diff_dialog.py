"""Run one scripted protocol conversation against Apache Kafka and kgroups, and compare.

A conversation is a function of a `Dialog`: it opens connections (one per simulated client, as
Kafka serves one request at a time per connection and JoinGroup may park), sends raw kio requests
and reads the answers, using whatever ids each broker handed out. Every answer it reads is
recorded, in script order, into the dialog's transcript. The same script runs against both
brokers at once (two threads, so timeouts elapse alike), and the two transcripts are compared
field by field after normalising what is legitimately random:

- generated ids (`<prefix>-<uuid>`) become `<prefix>-#n`, numbered per prefix in order of first
  appearance, so "the same member" is still checked, only not its random part;
- throttle times, and the node id, host and port of a coordinator, are dropped;
- member lists of JoinGroup and DescribeGroups, the topics and partitions of offset answers
  and the results of DeleteGroups are sorted (Kafka keeps members and offsets in hash maps,
  lists refused partitions first and answers deletions per coordinator partition, so their
  order carries no meaning);
- error codes become their names, durations milliseconds, bytes hex.

`compare(...)` returns {path: (kafka, kgroups)} for every field that differs; a test asserts
it is empty, or equal to the known differences listed in docs/compatibility.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

from kgroups.broker.wire import decode_response, encode_request, response_type

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_ID = re.compile(rf"(?P<prefix>\S*?)-{_UUID}")
_DROPPED = frozenset({"throttle_time", "node_id", "host", "port"})
_MISSING = "<missing>"
RESPONSE_TIMEOUT_S = 30.0

Script = Callable[["Dialog"], None]


class Pending:
    """A request sent on a connection whose answer has not been read yet."""

    def __init__(self, connection: Connection, correlation_id: int, request: Any,
                 label: str) -> None:
        self.connection = connection
        self.correlation_id = correlation_id
        self.request = request
        self.label = label

    def result(self, *, record: bool = True) -> Any:
        frame = self.connection.read_frame()
        schema = response_type(int(self.request.__api_key__), int(self.request.__version__))
        answered, response = decode_response(schema, frame)
        assert answered == self.correlation_id, "answers came out of order"
        if record:
            self.connection.dialog.record(self.label, response)
        return response

    def arrived(self, wait_s: float) -> bool:
        """Whether the answer is ready within `wait_s` (for "this join is parked" checks)."""
        self.connection.sock.settimeout(wait_s)
        try:
            return bool(self.connection.sock.recv(1, socket.MSG_PEEK))
        except TimeoutError:
            return False
        finally:
            self.connection.sock.settimeout(RESPONSE_TIMEOUT_S)


class Connection:
    """One client connection; its client id is the prefix of the member ids it is given."""

    def __init__(self, dialog: Dialog, client_id: str) -> None:
        self.dialog = dialog
        self.client_id = client_id
        self.sock = socket.create_connection(("127.0.0.1", dialog.port),
                                             timeout=RESPONSE_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_id = 0

    def send(self, request: Any, label: str | None = None) -> Pending:
        self._correlation_id += 1
        self.sock.sendall(encode_request(self._correlation_id, self.client_id, request))
        name = type(request).__name__.removesuffix("Request")
        return Pending(self, self._correlation_id, request,
                       label or f"{name}v{int(request.__version__)}[{self.client_id}]")

    def call(self, request: Any, label: str | None = None, *, record: bool = True) -> Any:
        return self.send(request, label).result(record=record)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def _read(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionError(f"{self.dialog.broker} closed {self.client_id}'s connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def closed_by_broker(self, wait_s: float = 5.0) -> bool:
        self.sock.settimeout(wait_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


class Dialog:
    """What a script sees: the broker's port, the conversation's names, its transcript."""

    def __init__(self, broker: str, port: int, group: str, topics: tuple[str, ...]) -> None:
        self.broker = broker
        self.port = port
        self.group = group
        self.topics = topics
        self.transcript: list[tuple[str, Any]] = []
        self._connections: list[Connection] = []
        self._lock = threading.Lock()

    def connect(self, client_id: str) -> Connection:
        connection = Connection(self, client_id)
        self._connections.append(connection)
        return connection

    def record(self, label: str, value: Any) -> None:
        with self._lock:
            self.transcript.append((label, value))

    def wait_state(self, state: str, group: str | None = None, timeout_s: float = 20.0) -> None:
        """Poll DescribeGroups (unrecorded) until the group is in `state`: a fence between two
        clients' requests, which Kafka may otherwise handle in either order."""
        probe = self.connect("state-probe")
        deadline = time.monotonic() + timeout_s
        seen = None
        while time.monotonic() < deadline:
            (described,) = probe.call(DescribeGroupsRequest(
                groups=(group or self.group,), include_authorized_operations=False),
                record=False).groups
            seen = described.group_state
            if seen == state:
                return
            time.sleep(0.02)
        raise AssertionError(f"{self.broker}: group stayed {seen}, never {state}")

    def close(self) -> None:
        for connection in self._connections:
            connection.sock.close()


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.name not in _DROPPED}
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class _Aliases:
    """`<prefix>-<uuid>` -> `<prefix>-#n`, n counted per prefix in order of appearance."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def __call__(self, match: re.Match[str]) -> str:
        raw = match.group(0)
        if raw not in self.names:
            prefix = match.group("prefix")
            self.counts[prefix] = self.counts.get(prefix, 0) + 1
            self.names[raw] = f"{prefix}-#{self.counts[prefix]}"
        return self.names[raw]

    def apply(self, value: Any) -> Any:
        if isinstance(value, str):
            return _ID.sub(self, value)
        if isinstance(value, list):
            return [self.apply(item) for item in value]
        if isinstance(value, dict):
            return {key: self.apply(item) for key, item in value.items()}
        return value


def normalise(transcript: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Aliases are given in transcript order before member lists are sorted by them."""
    aliases = _Aliases()
    aliased = [(label, aliases.apply(_plain(value))) for label, value in transcript]
    return [(label, _resort(value)) for label, value in aliased]


def _resort(value: Any) -> Any:
    """Member lists (those carrying metadata: JoinGroup's and DescribeGroups') by member id;
    the topics and partitions of offset answers by name and index."""
    if isinstance(value, dict):
        out = {key: _resort(item) for key, item in value.items()}
        members = out.get("members")
        if isinstance(members, list) and all(
                isinstance(m, dict) and ("metadata" in m or "member_metadata" in m)
                for m in members):
            out["members"] = sorted(members, key=lambda m: str(m.get("member_id")))
        for key, field in (("topics", "name"), ("partitions", "partition_index"),
                           ("results", "group_id")):
            items = out.get(key)
            if isinstance(items, list) and all(isinstance(i, dict) and field in i
                                               for i in items):
                out[key] = sorted(items, key=lambda i: i[field])
        return out
    if isinstance(value, list):
        return [_resort(item) for item in value]
    return value


def flatten(transcript: list[tuple[str, Any]]) -> dict[str, Any]:
    """{"3 JoinGroupv9[a].members[0].member_id": value, ...}; the step number keeps repeated
    labels apart and shows where in the conversation a field is."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            if not value:
                flat[prefix] = {}
            for key, item in value.items():
                walk(f"{prefix}.{key}", item)
        elif isinstance(value, list):
            flat[f"{prefix}.len"] = len(value)
            for index, item in enumerate(value):
                walk(f"{prefix}[{index}]", item)
        else:
            flat[prefix] = value

    for step, (label, value) in enumerate(transcript):
        walk(f"{step} {label}", value)
    return flat


def differences(kafka: list[tuple[str, Any]],
                kgroups: list[tuple[str, Any]]) -> dict[str, tuple[Any, Any]]:
    left, right = flatten(normalise(kafka)), flatten(normalise(kgroups))
    return {path: (left.get(path, _MISSING), right.get(path, _MISSING))
            for path in sorted(left.keys() | right.keys(), key=_step_order)
            if left.get(path, _MISSING) != right.get(path, _MISSING)}


def _step_order(path: str) -> tuple[int, str]:
    step, _, rest = path.partition(" ")
    return int(step), rest


def run_both(script: Script, ports: dict[str, int], group: str,
             topics: tuple[str, ...]) -> dict[str, list[tuple[str, Any]]]:
    """The script against each broker at the same time; {broker: transcript}."""
    dialogs = {name: Dialog(name, port, group, topics) for name, port in ports.items()}

    def run(dialog: Dialog) -> list[tuple[str, Any]]:
        try:
            script(dialog)
        finally:
            dialog.close()
        return dialog.transcript

    with ThreadPoolExecutor(len(dialogs)) as pool:
        futures = {name: pool.submit(run, dialog) for name, dialog in dialogs.items()}
        return {name: future.result() for name, future in futures.items()}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} chars)"


def render(diff: dict[str, tuple[Any, Any]]) -> str:
    return "\n".join(f"  {path}: kafka={_short(kafka)} kgroups={_short(kgroups)}"
                     for path, (kafka, kgroups) in diff.items())
