"""`kgroups topics ...`: kafka-topics for any Kafka-compatible broker.

The options are kafka-topics' own (`--create --topic t --partitions 3 --config k=v`,
`--describe`, `--alter --partitions`, `--delete`, `--list`), and so are the messages and the
describe layout, so commands carry over between the two; `--delete-records --offset-json-file`
is kafka-delete-records (delete_records_cli.py); a description also shows each
partition's log start and end offsets, which kafka-topics leaves to kafka-get-offsets.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from kgroups.tools import delete_records_cli, topic_admin
from kgroups.tools.admin import AdminError
from kgroups.tools.cli_output import print_json, run_to_pipe
from kgroups.tools.client_security import admin_command, connect_tool
from kgroups.tools.wire_client import KafkaWireClient, WireError

ACTIONS = ("create", "list", "describe", "alter", "delete", "delete_records")


class UsageError(Exception):
    """Options that do not go together; exit status 2, as for argparse's own errors."""


def _parse_config(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _action(args: argparse.Namespace) -> str:
    chosen = [name for name in ACTIONS if getattr(args, name)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, "
                         "--create, --alter, --delete or --delete-records")
    action = chosen[0]
    if (action == "delete_records") != (args.offset_json_file is not None):
        raise UsageError("--delete-records and --offset-json-file go together")
    if action == "delete_records" and args.topic:
        raise UsageError("--delete-records takes its topics from --offset-json-file, not --topic")
    if action in ("create", "alter", "delete") and not args.topic:
        raise UsageError(f"--{action} needs --topic")
    if action == "alter" and args.partitions is None:
        raise UsageError("--alter needs --partitions (the new, larger count)")
    if args.partitions is not None and action not in ("create", "alter"):
        raise UsageError("--partitions goes with --create or --alter only")
    if args.config and action != "create":
        raise UsageError("--config goes with --create only")
    if args.replication_factor is not None and action != "create":
        raise UsageError("--replication-factor goes with --create only")
    return action


def _describe_lines(d: topic_admin.TopicDescription) -> list[str]:
    configs = ",".join(f"{key}={value}" for key, value in sorted(d.configs.items()))
    lines = [f"Topic: {d.name}\tTopicId: {d.topic_id or '-'}\tPartitionCount: "
             f"{len(d.partitions)}\tReplicationFactor: {d.replication_factor}\t"
             f"Configs: {configs}"]
    for p in d.partitions:
        lines.append(
            f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
            f"Elr: N/A\tLastKnownElr: N/A\t"
            f"LogStartOffset: {_or_dash(p.log_start_offset)}\t"
            f"LogEndOffset: {_or_dash(p.log_end_offset)}")
    return lines


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _run(client: KafkaWireClient, action: str, args: argparse.Namespace) -> int:
    if action == "delete_records":
        return delete_records_cli.run(client, args.offsets)
    if action == "list":
        names = topic_admin.list_topics(client, include_internal=not args.exclude_internal)
        if args.topic:
            names = [name for name in names if name == args.topic]
        if args.output == "json":
            print_json(names)
        else:
            for name in names:
                print(name)
    elif action == "describe":
        if args.topic and args.if_exists and args.topic not in topic_admin.list_topics(client):
            return 0
        described = topic_admin.describe_topics(client, [args.topic] if args.topic else None)
        described = [d for d in described if not (args.exclude_internal and d.internal)]
        if args.output == "json":
            print_json([asdict(d) for d in described])
        else:
            for description in described:
                print("\n".join(_describe_lines(description)))
    elif action == "create":
        if args.if_not_exists and args.topic in topic_admin.list_topics(client):
            return 0
        topic_admin.create_topic(client, args.topic, args.partitions, dict(args.config),
                                 args.replication_factor)
        print(f"Created topic {args.topic}.")
    elif action == "alter":
        if args.if_exists and args.topic not in topic_admin.list_topics(client):
            return 0
        topic_admin.add_partitions(client, args.topic, args.partitions)
    else:
        if args.if_exists and args.topic not in topic_admin.list_topics(client):
            return 0
        topic_admin.delete_topic(client, args.topic)
    return 0


def _command(args: argparse.Namespace) -> int:
    try:
        action = _action(args)
        if action == "delete_records":  # the file is checked before anything is sent
            args.offsets = delete_records_cli.read_offset_file(args.offset_json_file)
        with connect_tool(args.bootstrap_server, args.command_config) as client:
            return run_to_pipe(lambda: _run(client, action, args))
    except UsageError as exc:
        print(f"kgroups topics: error: {exc}", file=sys.stderr)
        return 2
    except delete_records_cli.OffsetFileError as exc:
        print(f"kgroups topics: error: {exc}", file=sys.stderr)
        return 1
    except (WireError, AdminError) as exc:
        print(f"Error while executing topic command : {exc}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = admin_command(
        subparsers, "topics",
        "kafka-topics over the Kafka wire: create, list, describe, alter, delete topics",
        "Kafka's kafka-topics (and kafka-delete-records) for any Kafka-compatible "
        "broker. Name one action: --create, --list, --describe, --alter, --delete "
        "or --delete-records.")
    add = parser.add_argument
    add("--create", action="store_true", help="create a topic (--topic, --partitions, --config)")
    add("--list", action="store_true", help="list the topics' names")
    add("--describe", action="store_true",
        help="partitions, leaders, replicas, log start and end, topic id and the topic's own "
             "settings (every topic, or --topic)")
    add("--alter", action="store_true", help="add partitions to a topic (--partitions)")
    add("--delete", action="store_true", help="delete a topic and its data")
    add("--delete-records", action="store_true",
        help="kafka-delete-records: delete the records below an offset in each partition "
             "--offset-json-file names (the partition's log start moves there)")
    add("--offset-json-file", type=Path, metavar="FILE",
        help='with --delete-records: kafka-delete-records\' file, {"partitions": [{"topic": '
             '"t", "partition": 0, "offset": 5}], "version": 1}; offset -1 deletes up to the '
             'high watermark')
    add("--topic", metavar="TOPIC", help="the topic to act on")
    add("--partitions", type=int, metavar="N",
        help="with --create: the partition count (the broker's num.partitions if not given); "
             "with --alter: the new, larger count")
    add("--replication-factor", type=int, metavar="N",
        help="with --create: replicas per partition (the broker's default if not given)")
    add("--config", type=_parse_config, action="append", default=[], metavar="KEY=VALUE",
        help="with --create: a topic setting such as retention.ms=60000 (repeatable)")
    add("--if-not-exists", action="store_true",
        help="with --create: do nothing if the topic exists")
    add("--if-exists", action="store_true",
        help="with --alter, --describe, --delete: do nothing if the topic does not exist")
    add("--exclude-internal", action="store_true",
        help="with --list, --describe: leave out internal topics (__consumer_offsets)")
    add("--output", choices=("text", "json"), default="text",
        help="text as kafka-topics prints it, or JSON for scripts")
    parser.set_defaults(run=_command)
