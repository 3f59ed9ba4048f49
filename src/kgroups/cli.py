"""The `kgroups` command. Each part of kgroups registers its own sub-commands here, so this
module stays a table of contents: `register(subparsers)` in each part's `cli` module adds the
parsers, and each parser's `run` default runs it and returns the exit code. Those modules
import their heavy dependencies (the broker, Spark) only when their command runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kgroups.assignors import cli as assignors_cli
from kgroups.broker import cli as broker_cli
from kgroups.broker.cluster import storage_cli
from kgroups.pipeline import cli as pipeline_cli
from kgroups.records import cli as records_cli
from kgroups.simulate import cli as simulate_cli
from kgroups.tools import acls_cli, groups_cli, topics_cli, transactions_cli, users_cli

# The parts that contribute sub-commands, in the order `kgroups --help` lists them.
COMMAND_REGISTRARS: tuple[Callable[[Any], None], ...] = (
    broker_cli.register,
    groups_cli.register,
    topics_cli.register,
    transactions_cli.register,
    acls_cli.register,
    users_cli.register,
    assignors_cli.register,
    records_cli.register,
    pipeline_cli.register,
    storage_cli.register,
    simulate_cli.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgroups",
        description="Kafka consumer groups: broker, coordinator, log, assignors, pipeline",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in COMMAND_REGISTRARS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
