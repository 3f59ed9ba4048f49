"""`kgroups assign`: run a strategy over a scenario file and print the result as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kgroups.assignors.interface import registered_names
from kgroups.assignors.model import AssignmentInputError
from kgroups.assignors.scenario import assign_scenario


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "assign",
        help="assign partitions for a group described in a JSON scenario",
        description="Runs one assignment strategy over a scenario file and prints the result.",
    )
    parser.add_argument(
        "--strategy", required=True, help=f"one of: {', '.join(registered_names())}"
    )
    parser.add_argument("--input", required=True, help="scenario JSON file ('-' for stdin)")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also print balance (min/max partitions per member) and partitions moved",
    )
    parser.set_defaults(run=run_assign)


def run_assign(args: argparse.Namespace) -> int:
    """Exit 0 with the JSON result, or 1 with one line naming what is wrong."""
    try:
        if args.input == "-":
            text = sys.stdin.read()
        else:
            with open(args.input, encoding="utf-8") as handle:
                text = handle.read()
        scenario = json.loads(text)
        result = assign_scenario(args.strategy, scenario, compare=args.compare)
    except OSError as error:
        return _fail(f"cannot read {args.input}: {error.strerror}")
    except json.JSONDecodeError as error:
        return _fail(f"{args.input} is not valid JSON: {error.msg} at line {error.lineno}")
    except AssignmentInputError as error:
        return _fail(str(error))
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def _fail(message: str) -> int:
    print(f"kgroups assign: {message}", file=sys.stderr)
    return 1
