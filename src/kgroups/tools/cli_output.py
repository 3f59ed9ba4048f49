"""What `kgroups groups` and `kgroups topics` share on output: Kafka-style aligned tables, JSON
for scripts, and a quiet exit when the reader of a pipe (`| head`) stops early."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any


class DefaultsShown(argparse.HelpFormatter):
    """Help that states each option's default, where it has one worth stating."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, [], argparse.SUPPRESS) or "%(default)" in text:
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return f"{text} (default: %(default)s)"
        return text


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns, `-` for a missing value, as Kafka's tools print them."""
    cells = [list(headers)] + [
        ["-" if cell is None or cell == "" else str(cell) for cell in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def assignment_text(partitions: Sequence[tuple[str, int]]) -> str:
    """Partitions as Kafka's group tools print an assignment: `topic:0,1;other:2`."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(f"{topic}:{','.join(map(str, sorted(p)))}"
                    for topic, p in sorted(by_topic.items()))


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def parse_bootstrap(text: str) -> tuple[str, int]:
    """HOST:PORT; of a comma-separated list (as Kafka's tools take it) the first is used."""
    first = text.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def parse_topic(text: str) -> tuple[str, tuple[int, ...] | None]:
    """`topic` or `topic:0,2,5`, as kafka-consumer-groups accepts."""
    topic, sep, partitions = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError("empty topic name")
    if not sep:
        return topic, None
    try:
        return topic, tuple(int(part) for part in partitions.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad partition list in {text!r}") from None


def run_to_pipe(action: Callable[[], int]) -> int:
    """Run a command whose output may go to a reader that stops early (`| head`): the closed
    pipe ends the command quietly instead of with a BrokenPipeError traceback."""
    try:
        code = action()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return code
