"""The `kgroups` command. Each part of kgroups registers its own sub-commands here, so this
module stays a table of contents: `register(subparsers)` in each part's `cli` module adds the
parsers, and each parser's `handler` default runs it and returns the exit code."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# The parts that contribute sub-commands, in the order `kgroups --help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "kgroups.broker.cli",
    "kgroups.broker.admin_cli",
    "kgroups.assignors.cli",
    "kgroups.records.cli",
    "kgroups.pipeline.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgroups",
        description="Kafka consumer groups: broker, coordinator, log, assignors, pipeline",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
