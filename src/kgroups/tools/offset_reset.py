"""Planning a consumer group's offset reset as kafka-consumer-groups --reset-offsets does.

A plan is computed without changing anything (the dry run is the default, since an unintended
reset silently replays or skips data) and committed only on request. Every scope (topics with
optional partitions, all topics the group has offsets for, the partitions of a CSV file) and
every mode of Kafka's tool is here; targets outside the log are moved to its nearest end and
reported with Kafka's words, not clamped silently.
"""

from __future__ import annotations

import csv
import datetime
import io
import re
import time
from dataclasses import dataclass, field
from typing import Literal

from kgroups.tools.admin import (
    EARLIEST_TIMESTAMP,
    INACTIVE_STATES,
    LATEST_TIMESTAMP,
    AdminError,
    OffsetReset,
    committed_offsets,
    describe_state,
    list_offsets,
    topic_partitions,
)
from kgroups.tools.wire_client import KafkaWireClient

Mode = Literal["earliest", "latest", "current", "offset", "shift", "timestamp", "file"]
TopicScope = tuple[str, tuple[int, ...] | None]
_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """One of Kafka's reset specifications: `value` is the offset (offset), the shift (shift)
    or epoch milliseconds (timestamp); `from_file` holds a --from-file's offsets."""

    mode: Mode
    value: int | None = None
    from_file: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResetPlan:
    resets: list[OffsetReset]
    notes: list[str]  # what Kafka's tool warns about: targets moved into the log, no records


def parse_datetime(text: str) -> datetime.datetime:
    """ISO-8601 (Kafka's 'YYYY-MM-DDThh:mm:ss.sss', with or without a zone). Without a zone the
    time is read in this machine's local zone, as Kafka's tool reads it."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise AdminError(f"not an ISO-8601 date-time: {text!r}") from exc
    return moment.astimezone() if moment.tzinfo is None else moment


def zone_note(text: str) -> str:
    """Which zone a --to-datetime was read in, for the operator to see."""
    if parse_datetime(text).tzinfo == datetime.datetime.fromisoformat(text).tzinfo:
        return "the zone given"
    zone = datetime.datetime.now().astimezone().tzname()
    return f"no zone given: read in this machine's zone, {zone}, as Kafka's tool reads it"


def parse_datetime_ms(text: str) -> int:
    return int(parse_datetime(text).timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """Java's Duration format as --by-duration takes it: 'PnDTnHnMnS' (e.g. PT1H30M, P2D)."""
    match = _DURATION.match(text.strip())
    if match is None or text.strip().upper() in ("P", "PT", "-P", "+P"):
        raise AdminError(f"not a duration like PnDTnHnMnS: {text!r}")
    seconds = (int(match["days"] or 0) * 86400 + int(match["hours"] or 0) * 3600
               + int(match["minutes"] or 0) * 60 + float(match["seconds"] or 0))
    return int(seconds * 1000) * (-1 if match["sign"] == "-" else 1)


def timestamp_before_now(duration_ms: int) -> int:
    return int(time.time() * 1000) - duration_ms


def read_offsets_csv(text: str) -> dict[tuple[str, int], int]:
    """The CSV Kafka's --export writes and --from-file reads: `topic,partition,offset` per
    line (or `group,topic,partition,offset`, whose group column is ignored)."""
    offsets: dict[tuple[str, int], int] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        if len(row) not in (3, 4):
            raise AdminError(f"line {number}: expected topic,partition,offset, got {row}")
        topic, partition, offset = row[-3:]
        try:
            offsets[(topic.strip(), int(partition))] = int(offset)
        except ValueError:
            raise AdminError(f"line {number}: partition and offset must be integers, "
                             f"got {row}") from None
    return offsets


def export_csv(resets: list[OffsetReset]) -> str:
    return "".join(f"{r.topic},{r.partition},{r.new_offset}\n" for r in resets)


def _scope_partitions(
    client: KafkaWireClient, topics: list[TopicScope] | None, target: ResetTarget,
    committed: dict[tuple[str, int], int],
) -> list[tuple[str, int]]:
    if target.mode == "file" and not topics:
        return sorted(target.from_file)
    if topics is None:  # --all-topics: every partition the group has an offset for
        return sorted(committed)
    chosen: set[tuple[str, int]] = set()
    for topic, partitions in topics:
        known = topic_partitions(client, topic)
        wanted = known if partitions is None else list(partitions)
        missing = sorted(set(wanted) - set(known))
        if missing:
            names = ", ".join(f"{topic}-{p}" for p in missing)
            raise AdminError(f'The partitions "{names}" do not exist')
        chosen.update((topic, p) for p in wanted)
    return sorted(chosen)


def plan_reset(
    client: KafkaWireClient, group_id: str, topics: list[TopicScope] | None, target: ResetTarget
) -> ResetPlan:
    """New offsets for the scope (`topics` None = all topics), changing nothing. Refused while
    the group has members: they would overwrite the reset with their next commit."""
    state = describe_state(client, group_id)
    if state not in INACTIVE_STATES:
        raise AdminError(f"Assignments can only be reset if the group '{group_id}' is "
                         f"inactive, but the current state is {state}.")
    committed = committed_offsets(client, group_id)
    keys = _scope_partitions(client, topics, target, committed)
    if not keys:
        return ResetPlan([], [])
    earliest = list_offsets(client, keys, EARLIEST_TIMESTAMP)
    latest = list_offsets(client, keys, LATEST_TIMESTAMP)
    by_time = (list_offsets(client, keys, target.value or 0)
               if target.mode == "timestamp" else {})
    notes: list[str] = []
    resets: list[OffsetReset] = []
    for key in keys:
        low, high = earliest[key] or 0, latest[key] or 0
        wanted = _wanted_offset(key, target, committed, low, high, by_time, notes)
        resets.append(OffsetReset(key[0], key[1], committed.get(key),
                                  _into_log(key, wanted, low, high, notes)))
    return ResetPlan(resets, notes)


def _wanted_offset(
    key: tuple[str, int], target: ResetTarget, committed: dict[tuple[str, int], int],
    low: int, high: int, by_time: dict[tuple[str, int], int | None], notes: list[str],
) -> int:
    current = committed.get(key)
    match target.mode:
        case "earliest":
            return low
        case "latest":
            return high
        case "current":  # a partition without a commit starts at the log end, as in Kafka
            return high if current is None else current
        case "offset":
            return target.value or 0
        case "shift":
            if current is None:
                raise AdminError(f"Cannot shift offset for partition {key[0]}-{key[1]} since "
                                 "there is no current committed offset")
            return current + (target.value or 0)
        case "timestamp":
            found = by_time.get(key)
            if found is None:
                notes.append(f"Warn: Partition {key[1]} from topic {key[0]} is empty. "
                             "Falling back to latest known offset.")
                return high
            return found
        case "file":
            if key not in target.from_file:
                raise AdminError(f"{key[0]}-{key[1]} is not in the file")
            return target.from_file[key]


def _into_log(key: tuple[str, int], offset: int, low: int, high: int, notes: list[str]) -> int:
    where = f"{key[0]}-{key[1]}"
    if offset > high:
        notes.append(f"New offset ({offset}) is higher than latest offset for topic partition "
                     f"{where}. Value will be set to {high}")
        return high
    if offset < low:
        notes.append(f"New offset ({offset}) is lower than earliest offset for topic partition "
                     f"{where}. Value will be set to {low}")
        return low
    return offset
