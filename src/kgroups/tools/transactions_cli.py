"""`kgroups transactions COMMAND`: kafka-transactions.sh for any Kafka-compatible broker.

The commands and their options are kafka-transactions' own (list, describe, describe-producers,
abort, find-hanging), and so are the tables' columns, so scripts and runbooks carry over;
`--output json` gives the same rows to scripts. A hanging transaction is one a partition holds
open that its coordinator does not (its marker was lost): it blocks read_committed consumers
and the partition's last stable offset until `abort` writes the missing ABORT marker.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from kgroups.tools import transaction_admin as admin
from kgroups.tools.admin import AdminError
from kgroups.tools.cli_output import print_json, run_to_pipe, table
from kgroups.tools.client_security import admin_command, connect_tool
from kgroups.tools.wire_client import KafkaWireClient, WireError

LIST_COLUMNS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions")
PRODUCER_COLUMNS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_COLUMNS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                   "StartOffset", "LastTimestamp", "Duration(min)")


class UsageError(Exception):
    """Options that do not go together; exit status 2, as for argparse's own errors."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _show(args: argparse.Namespace, columns: Sequence[str], rows: Sequence[Sequence[object]],
          items: Sequence[Any]) -> None:
    if args.output == "json":
        print_json([asdict(item) for item in items])
    else:
        print(table(columns, rows))


def _list(client: KafkaWireClient, args: argparse.Namespace) -> int:
    found = admin.list_transactions(client, tuple(args.state), tuple(args.producer_id),
                                    args.duration_ms)
    _show(args, LIST_COLUMNS, [(t.transactional_id, t.coordinator, t.producer_id, t.state)
                               for t in found], found)
    return 0


def _describe(client: KafkaWireClient, args: argparse.Namespace) -> int:
    transactional_id = args.transactional_id or args.id
    if not transactional_id:
        raise UsageError("describe needs a transactional id (ID or --transactional-id)")
    d = admin.describe_transaction(client, transactional_id)
    duration = None if d.start_time_ms is None else max(_now_ms() - d.start_time_ms, 0)
    _show(args, DESCRIBE_COLUMNS, [(
        d.coordinator, d.transactional_id, d.producer_id, d.producer_epoch, d.state,
        d.timeout_ms, d.start_time_ms, duration,
        ",".join(f"{topic}-{partition}" for topic, partition in d.partitions))], [d])
    return 0


def _describe_producers(client: KafkaWireClient, args: argparse.Namespace) -> int:
    key = (args.topic, args.partition)
    producers = admin.describe_producers(client, [key])[key]
    _show(args, PRODUCER_COLUMNS, [(p.producer_id, p.producer_epoch, p.coordinator_epoch,
                                    p.last_sequence, p.last_timestamp, p.txn_start_offset)
                                   for p in producers], producers)
    return 0


def _abort(client: KafkaWireClient, args: argparse.Namespace) -> int:
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if (args.start_offset is None) == all(value is None for value in explicit):
        raise UsageError("abort needs --start-offset, or --producer-id, --producer-epoch and "
                         "--coordinator-epoch")
    if args.start_offset is None and any(value is None for value in explicit):
        raise UsageError("--producer-id, --producer-epoch and --coordinator-epoch go together")
    if args.start_offset is not None:
        found = admin.producer_at(client, args.topic, args.partition, args.start_offset)
        explicit = (found.producer_id, found.producer_epoch, found.coordinator_epoch)
    producer_id, epoch, coordinator_epoch = (int(value) for value in explicit)
    admin.abort_transaction(client, args.topic, args.partition, producer_id, epoch,
                            coordinator_epoch)
    print(f"Aborted the transaction of producer {producer_id} (epoch {epoch}) on "
          f"{args.topic}-{args.partition}")
    return 0


def _find_hanging(client: KafkaWireClient, args: argparse.Namespace) -> int:
    if (args.topic is None) == (args.broker_id is None):
        raise UsageError("find-hanging needs --topic or --broker-id")
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition goes with --topic")
    found = admin.find_hanging(client, _now_ms(), topic=args.topic, partition=args.partition,
                               broker_id=args.broker_id,
                               max_timeout_minutes=args.max_transaction_timeout)
    _show(args, HANGING_COLUMNS, [(h.topic, h.partition, h.producer_id, h.producer_epoch,
                                   h.coordinator_epoch, h.start_offset, h.last_timestamp,
                                   h.duration_minutes) for h in found], found)
    return 0


RUNNERS: dict[str, Callable[[KafkaWireClient, argparse.Namespace], int]] = {
    "list": _list, "describe": _describe, "describe-producers": _describe_producers,
    "abort": _abort, "find-hanging": _find_hanging,
}


def _command(args: argparse.Namespace) -> int:
    try:
        with connect_tool(args.bootstrap_server, args.command_config) as client:
            return run_to_pipe(lambda: RUNNERS[args.transactions_command](client, args))
    except UsageError as exc:
        print(f"kgroups transactions: error: {exc}", file=sys.stderr)
        return 2
    except (WireError, AdminError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", choices=("text", "json"), default="text",
                        help="a table with kafka-transactions' columns, or JSON for scripts")


def _partition_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--topic", required=required, metavar="TOPIC", help="the topic")
    parser.add_argument("--partition", type=int, required=required, metavar="N",
                        help="the partition")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = admin_command(
        subparsers, "transactions",
        "kafka-transactions over the Kafka wire: list, describe, find and abort hanging "
        "transactions",
        "Kafka's kafka-transactions for any Kafka-compatible broker: the transactional ids and "
        "their states, the producers of a partition, and the hanging transactions (open in a "
        "partition, unknown to their coordinator) with their abort.")
    commands = parser.add_subparsers(dest="transactions_command", metavar="COMMAND",
                                     required=True)
    listing = commands.add_parser("list", help="the transactional ids of every broker")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         help="only ids in this state, e.g. Ongoing (repeatable)")
    listing.add_argument("--producer-id", action="append", type=int, default=[], metavar="ID",
                         help="only ids with this producer id (repeatable)")
    listing.add_argument("--duration-ms", type=int, default=-1, metavar="MS",
                         help="only transactions open longer than this (ListTransactions v1)")
    _output(listing)
    describe = commands.add_parser("describe", help="one transactional id's state and partitions")
    describe.add_argument("id", nargs="?", metavar="ID", help="the transactional id")
    describe.add_argument("--transactional-id", metavar="ID", help="the transactional id")
    _output(describe)
    producers = commands.add_parser("describe-producers",
                                    help="the producers a partition's leader knows")
    _partition_options(producers, required=True)
    _output(producers)
    abort = commands.add_parser(
        "abort", help="write the ABORT marker of a hanging transaction (needs ClusterAction)")
    _partition_options(abort, required=True)
    abort.add_argument("--start-offset", type=int, metavar="OFFSET",
                       help="the offset the open transaction starts at (find-hanging's "
                            "StartOffset)")
    abort.add_argument("--producer-id", type=int, metavar="ID",
                       help="without --start-offset: the producer id")
    abort.add_argument("--producer-epoch", type=int, metavar="EPOCH",
                       help="without --start-offset: the producer epoch")
    abort.add_argument("--coordinator-epoch", type=int, metavar="EPOCH",
                       help="without --start-offset: the coordinator epoch")
    hanging = commands.add_parser("find-hanging",
                                  help="open transactions their coordinator does not hold")
    _partition_options(hanging, required=False)
    hanging.add_argument("--broker-id", type=int, metavar="ID",
                         help="every partition this broker leads")
    hanging.add_argument("--max-transaction-timeout", type=int,
                         default=admin.DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
                         metavar="MINUTES",
                         help="only transactions open longer than this (the brokers' "
                              "transaction.max.timeout.ms)")
    _output(hanging)
    parser.set_defaults(run=_command)
