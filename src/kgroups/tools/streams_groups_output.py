"""How `kgroups groups --describe` prints a streams group (KIP-1071): the tables Kafka's
kafka-streams-groups prints (--state, --members, --offsets, each with --verbose), so an operator
reads the same columns whichever tool they run, and the JSON of `--output json` with every
member's current and target tasks by kind.

A task is a subtopology and a partition; an assignment is printed as Kafka's tool prints it, per
kind with tasks, each subtopology with its partitions: "ACTIVE: 0:[0,1]; 1:[0]; ".
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict

from kgroups.tools.cli_output import table
from kgroups.tools.streams_admin import StreamsGroupDescription, StreamsTasks

# Each kind of task with the word Kafka's tool prints before it.
TASK_KINDS: Mapping[str, str] = {"active": "ACTIVE", "standby": "STANDBY", "warmup": "WARMUP"}


def tasks_text(tasks: StreamsTasks, prefix: str = "") -> str:
    """One member's tasks as Kafka's tool prints them ("" for none)."""
    return "".join(
        f"{prefix}{label}: "
        + "".join(f"{subtopology}:[{','.join(map(str, partitions))}]; "
                  for subtopology, partitions in getattr(tasks, kind))
        for kind, label in TASK_KINDS.items() if getattr(tasks, kind))


def _lag(committed: int | None, log_end: int | None) -> int | str:
    if committed is None or log_end is None:
        return "-"
    return max(log_end - committed, 0)


def print_streams_description(d: StreamsGroupDescription, *, state: bool, members: bool,
                              verbose: bool) -> None:
    """The table kafka-streams-groups --describe prints for the same options."""
    print()
    if not d.members:  # on stderr, as Kafka's tool says it: the table stays parseable
        print(f"Streams group '{d.group_id}' has no active members.", file=sys.stderr)
    if state:
        host, port, node = d.coordinator
        print(table(["GROUP", "COORDINATOR (ID)", "STATE",
                     *(["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if verbose else []),
                     "#MEMBERS"],
                    [[d.group_id, f"{host}:{port} ({node})", d.state,
                      *([d.group_epoch, d.assignment_epoch] if verbose else []),
                      len(d.members)]]))
    elif members:
        if not d.members:  # Kafka's tool prints no table then
            return
        headers: Sequence[str] = (
            ["GROUP", "TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH", "MEMBER", "MEMBER-PROTOCOL",
             "MEMBER-EPOCH", "PROCESS", "CLIENT-ID", "ASSIGNMENTS"] if verbose
            else ["GROUP", "MEMBER", "PROCESS", "CLIENT-ID", "ASSIGNMENTS"])
        print(table(list(headers), [
            [d.group_id, d.assignment_epoch, d.topology_epoch, m.member_id,
             "classic" if m.is_classic else "streams", m.member_epoch, m.process_id,
             m.client_id, tasks_text(m.assignment) + tasks_text(m.target, "TARGET-")]
            if verbose else
            [d.group_id, m.member_id, m.process_id, m.client_id, tasks_text(m.assignment)]
            for m in d.members]))
    else:
        # The input partitions of the members' active tasks, as Kafka's tool lists them.
        rows = [[d.group_id, lag.topic, lag.partition,
                 *([lag.committed_offset, "-", lag.log_end_offset] if verbose else []),
                 _lag(lag.committed_offset, lag.log_end_offset)]
                for lag in d.partitions]
        if rows:
            print(table(["GROUP", "TOPIC", "PARTITION",
                         *(["CURRENT-OFFSET", "LEADER-EPOCH", "LOG-END-OFFSET"]
                           if verbose else []), "OFFSET-LAG"], rows))


def streams_description_json(d: StreamsGroupDescription) -> dict[str, object]:
    host, port, node = d.coordinator
    return {
        "group": d.group_id, "type": "streams", "state": d.state,
        "coordinator": {"host": host, "port": port, "id": node},
        "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
        "topology_epoch": d.topology_epoch,
        "subtopologies": [asdict(s) for s in d.subtopologies],
        "members": [{
            "member_id": m.member_id, "member_epoch": m.member_epoch,
            "instance_id": m.instance_id, "process_id": m.process_id,
            "client_id": m.client_id, "host": m.client_host,
            "topology_epoch": m.topology_epoch, "is_classic": m.is_classic,
            "tasks": {kind: list(m.assignment.ids(kind)) for kind in TASK_KINDS},
            "target": {kind: list(m.target.ids(kind)) for kind in TASK_KINDS},
            "reconciling": m in d.reconciling}
            for m in d.members],
        "offsets": [{"topic": lag.topic, "partition": lag.partition,
                     "current_offset": lag.committed_offset,
                     "log_end_offset": lag.log_end_offset, "lag": lag.lag}
                    for lag in d.partitions],
    }
