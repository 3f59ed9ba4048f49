"""`kgroups groups ...`: kafka-consumer-groups.sh for any Kafka-compatible broker.

Output is aligned columns like Kafka's tool so operators read it the same way; a dry run is the
default for reset-offsets because an unintended reset silently replays or skips data.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kgroups.broker import admin
from kgroups.broker.wire_client import KafkaWireClient, WireError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _parse_bootstrap(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def _parse_topic(text: str) -> tuple[str, tuple[int, ...] | None]:
    """`topic` or `topic:0,2,5`, as kafka-consumer-groups.sh accepts."""
    topic, sep, partitions = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError("empty topic name")
    if not sep:
        return topic, None
    try:
        return topic, tuple(int(part) for part in partitions.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad partition list in {text!r}") from None


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(headers)] + [
        ["-" if cell is None or cell == "" else str(cell) for cell in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def _run_list(client: KafkaWireClient, args: argparse.Namespace) -> int:
    listings = admin.list_groups(client, tuple(args.state or ()))
    print(_table(["GROUP", "STATE", "PROTOCOL-TYPE"],
                 [[g.group_id, g.state, g.protocol_type] for g in listings]))
    return 0


def _run_describe(client: KafkaWireClient, args: argparse.Namespace) -> int:
    coordinator = admin.connect_to_coordinator(client, args.group)
    description = admin.describe_group(coordinator, args.group)
    print(f"GROUP {description.group_id}  STATE {description.state}  "
          f"PROTOCOL-TYPE {description.protocol_type or '-'}  "
          f"PROTOCOL {description.protocol or '-'}  MEMBERS {len(description.members)}")
    members = {member.member_id: member for member in description.members}
    rows = []
    for lag in description.partitions:
        member = members.get(lag.member_id or "")
        rows.append([
            lag.topic, lag.partition, lag.committed_offset, lag.log_end_offset, lag.lag,
            lag.member_id, member.client_host if member else None,
            member.client_id if member else None,
        ])
    print()
    print(_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"], rows))
    if description.members:
        print()
        print(_table(
            ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
            [[m.member_id, m.group_instance_id, m.client_host, m.client_id, len(m.partitions)]
             for m in description.members],
        ))
    return 0


def _run_delete(client: KafkaWireClient, args: argparse.Namespace) -> int:
    coordinator = admin.connect_to_coordinator(client, args.group)
    admin.delete_group(coordinator, args.group)
    print(f"Deletion of group {args.group!r} succeeded.")
    return 0


def _reset_target(args: argparse.Namespace) -> admin.ResetTarget:
    if args.to_earliest:
        return admin.ResetTarget(earliest=True)
    if args.to_latest:
        return admin.ResetTarget(latest=True)
    if args.to_offset is not None:
        return admin.ResetTarget(offset=args.to_offset)
    return admin.ResetTarget(timestamp_ms=admin.parse_datetime_ms(args.to_datetime))


def _run_reset(client: KafkaWireClient, args: argparse.Namespace) -> int:
    coordinator = admin.connect_to_coordinator(client, args.group)
    topic, partitions = args.topic
    plan = admin.plan_reset(coordinator, args.group, topic, partitions, _reset_target(args))
    if args.execute:
        admin.execute_reset(coordinator, args.group, plan)
    else:
        print("Dry run: nothing committed (add --execute to apply).")
    print(_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                 [[args.group, r.topic, r.partition, r.current_offset, r.new_offset]
                  for r in plan]))
    return 0


def _handle(args: argparse.Namespace) -> int:
    host, port = args.bootstrap_server
    try:
        with KafkaWireClient(host, port) as client:
            return int(args.groups_action(client, args))
    except (WireError, admin.AdminError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    groups = subparsers.add_parser("groups", help="list, describe, delete consumer groups, reset "
                                                  "their offsets (over the Kafka wire)")
    groups.add_argument("--bootstrap-server", type=_parse_bootstrap,
                        default=_parse_bootstrap(DEFAULT_BOOTSTRAP), metavar="HOST:PORT",
                        help=f"broker to ask (default {DEFAULT_BOOTSTRAP})")
    groups.set_defaults(handler=_handle)
    # Kafka's kafka-consumer-groups.sh takes --bootstrap-server anywhere on the line, so each
    # action accepts it too; SUPPRESS keeps an action from overriding the value given before it.
    after_action = argparse.ArgumentParser(add_help=False)
    after_action.add_argument("--bootstrap-server", type=_parse_bootstrap,
                              default=argparse.SUPPRESS, metavar="HOST:PORT",
                              help="broker to ask")
    actions = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    def add_action(name: str, help_text: str) -> argparse.ArgumentParser:
        return actions.add_parser(name, help=help_text, parents=[after_action])

    listing = add_action("list", "every group with its state")
    listing.add_argument("--state", action="append",
                         help="only groups in this state (repeatable, case-insensitive)")
    listing.set_defaults(groups_action=_run_list)

    describe = add_action("describe", "members, partitions, offsets and lag")
    describe.add_argument("group")
    describe.set_defaults(groups_action=_run_describe)

    delete = add_action("delete", "delete an empty group and its offsets")
    delete.add_argument("group")
    delete.set_defaults(groups_action=_run_delete)

    reset = add_action("reset-offsets",
                       "move an inactive group's offsets (dry run unless --execute)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True, type=_parse_topic, metavar="TOPIC[:P,P...]")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N")
    target.add_argument("--to-datetime", metavar="ISO-8601")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(groups_action=_run_reset)
