"""`kgroups groups ...`: kafka-consumer-groups for any Kafka-compatible broker.

It takes Kafka's tool's options (`--describe --group g --members`, `--reset-offsets --all-topics
--shift-by -3`, ...) and prints its tables, so an operator's commands and habits carry over; the
older `kgroups groups describe GROUP` forms name the action as a word and still work. A dry run
is the default for resets because an unintended reset silently replays or skips data.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.tools import admin, lag_reader, streams_admin
from kgroups.tools.cli_output import (
    assignment_text,
    parse_topic,
    print_json,
    run_to_pipe,
    table,
)
from kgroups.tools.client_security import admin_command, connect_tool
from kgroups.tools.offset_reset import (
    ResetTarget,
    export_csv,
    parse_datetime,
    parse_duration_ms,
    plan_reset,
    read_offsets_csv,
    timestamp_before_now,
    zone_note,
)
from kgroups.tools.share_admin import ShareGroupDescription, ShareGroupNotFoundError
from kgroups.tools.share_groups_cli import describe_share, print_share_group, share_group_json
from kgroups.tools.streams_admin import StreamsGroupDescription
from kgroups.tools.streams_groups_output import (
    print_streams_description,
    streams_description_json,
)
from kgroups.tools.wire_client import KafkaWireClient, WireError

ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")
# Kafka's names, in the order its tool lists them.
GROUP_STATES = ("Stable", "Dead", "PreparingRebalance", "CompletingRebalance", "Assigning",
                "Reconciling", "Empty", "NotReady")
GROUP_TYPES = ("Consumer", "Classic", "Share", "Streams")  # Kafka's GroupType order
RESET_MODES = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime",
               "by_duration", "from_file")


class UsageError(Exception):
    """Options that do not go together; exit status 2, as for argparse's own errors."""


def _action(args: argparse.Namespace) -> str:
    """The one action asked for, by flag or (the older form) by word before the groups."""
    flagged = [name for name in ACTIONS if getattr(args, name.replace("-", "_"))]
    words = list(args.words)
    if words and words[0] in ACTIONS:
        flagged.append(words.pop(0))
        args.group = [*args.group, *words]
    elif words:
        raise UsageError(f"unknown action {words[0]!r}; expected one of {', '.join(ACTIONS)} "
                         "(or --list, --describe, ...)")
    if len(set(flagged)) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, "
                         "--delete, --reset-offsets, --delete-offsets")
    return flagged[0]


def _names(values: list[str] | None, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    """`--state stable,empty` (repeatable, any case) to Kafka's spelling; None if not given."""
    given = [item.strip() for value in values or () for item in value.split(",") if item.strip()]
    by_lower = {name.lower(): name for name in allowed}
    wrong = [item for item in given if item.lower() not in by_lower]
    if wrong:
        raise UsageError(f"Invalid {what} list '{','.join(wrong)}'. Valid {what}s are: "
                         f"{', '.join(allowed)}")
    return tuple(by_lower[item.lower()] for item in given)


def _groups(client: KafkaWireClient, args: argparse.Namespace, *, at_most_one: bool) -> list[str]:
    if args.all_groups and args.group:
        raise UsageError("--all-groups and --group cannot be used together")
    groups = ([g.group_id for g in admin.list_groups(client)] if args.all_groups
              else list(dict.fromkeys(args.group)))
    if not groups and not args.all_groups:
        raise UsageError("name a group: --group GROUP (repeatable) or --all-groups")
    if at_most_one and len(groups) > 1:
        raise UsageError("this action takes one group at a time")
    return groups


# ------------------------------------------------------------------------------ --list

def _run_list(client: KafkaWireClient, args: argparse.Namespace) -> int:
    states = _names(args.state, GROUP_STATES, "state")
    types = _names(args.type, GROUP_TYPES, "type")
    listings = admin.list_groups(client, states, tuple(t.lower() for t in types))
    if args.output == "json":
        print_json([{"group": g.group_id, "state": g.state, "type": g.group_type.capitalize(),
                     "protocol_type": g.protocol_type} for g in listings])
        return 0
    show_state, show_type = args.state is not None, args.type is not None
    if not show_state and not show_type:
        for listing in listings:
            print(listing.group_id)
        return 0
    headers = ["GROUP", *(["TYPE"] if show_type else []), *(["STATE"] if show_state else [])]
    print(table(headers, [[g.group_id, *([g.group_type.capitalize()] if show_type else []),
                           *([g.state] if show_state else [])] for g in listings]))
    return 0


# -------------------------------------------------------------------------- --describe

def _or_dash(value: int | None) -> str:
    """An epoch only consumer groups have; Kafka's tool prints '-' for a classic group."""
    return "-" if value is None else str(value)


def _print_description(d: admin.GroupDescription, args: argparse.Namespace) -> None:
    print()
    if not d.members:  # on stderr, as Kafka's tool prints it: the table stays parseable
        print(f"Consumer group '{d.group_id}' has no active members.", file=sys.stderr)
    for m in d.reconciling:  # on stderr too: what Kafka's tool leaves to the reader to spot
        print(f"Member {m.member_id} of consumer group '{d.group_id}' is still reconciling: "
              f"epoch {m.member_epoch} of target assignment epoch {d.assignment_epoch}, holds "
              f"[{assignment_text(m.partitions)}], target [{assignment_text(m.target or ())}]",
              file=sys.stderr)
    if args.state is not None:
        host, port, node = d.coordinator
        headers = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                   *(["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if args.verbose else []),
                   "#MEMBERS", "LAST-REBALANCE", "REBALANCE-CAUSE"]
        print(table(headers, [[d.group_id, f"{host}:{port} ({node})", d.protocol, d.state,
                               *([_or_dash(d.group_epoch), _or_dash(d.assignment_epoch)]
                                 if args.verbose else []), len(d.members),
                               *_rebalance_cells(d.last_rebalance)]]))
    elif args.members:
        with_instance = any(m.group_instance_id for m in d.members)
        headers = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if with_instance else []),
                   "HOST", "CLIENT-ID", "#PARTITIONS",
                   *(["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
                     if args.verbose else [])]
        print(table(headers, [
            [d.group_id, m.member_id, *([m.group_instance_id] if with_instance else []),
             m.client_host, m.client_id, len(m.partitions),
             *([_or_dash(m.member_epoch), assignment_text(m.partitions),
                _or_dash(d.assignment_epoch),
                "-" if m.target is None else assignment_text(m.target)]
               if args.verbose else [])]
            for m in d.members]))
    else:
        members = {member.member_id: member for member in d.members}
        rows = []
        for lag in d.partitions:
            member = members.get(lag.member_id or "")
            rows.append([d.group_id, lag.topic, lag.partition,
                         *(["-"] if args.verbose else []),
                         lag.committed_offset, lag.log_end_offset, lag.lag, lag.member_id,
                         member.client_host if member else None,
                         member.client_id if member else None, _seconds(lag.lag_seconds)])
        # LAG-SECONDS is kgroups' own: last, so Kafka's columns keep their places for scripts.
        print(table(["GROUP", "TOPIC", "PARTITION", *(["LEADER-EPOCH"] if args.verbose else []),
                     "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                     "CLIENT-ID", "LAG-SECONDS"], rows))
        note = d.last_rebalance
        if note is not None:  # on stderr, like the notes above: the table stays Kafka's
            print(f"Last rebalance of group '{d.group_id}': {note.cause.value} at "
                  f"{_when(note.started_ms)} (old generation {note.old_generation}): "
                  f"{note.detail}", file=sys.stderr)


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.3f}"


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def _rebalance_cells(note: RebalanceNote | None) -> list[str | None]:
    return [None, None] if note is None else [_when(note.started_ms), note.cause.value]


def _rebalance_json(note: RebalanceNote | None) -> dict[str, object] | None:
    if note is None:
        return None
    return {"cause": note.cause.value, "detail": note.detail, "at": _when(note.started_ms),
            "started_ms": note.started_ms, "old_generation": note.old_generation}


def _description_json(d: admin.GroupDescription) -> dict[str, object]:
    members = {member.member_id: member for member in d.members}
    reconciling = d.reconciling
    host, port, node = d.coordinator
    return {
        "group": d.group_id, "state": d.state, "protocol_type": d.protocol_type,
        "assignment_strategy": d.protocol,
        "coordinator": {"host": host, "port": port, "id": node},
        "last_rebalance": _rebalance_json(d.last_rebalance),
        "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
        "members": [asdict(m) | {
            "partitions": [list(p) for p in m.partitions],
            "target": None if m.target is None else [list(p) for p in m.target],
            "reconciling": None if d.assignment_epoch is None else m in reconciling}
            for m in d.members],
        "offsets": [{"topic": lag.topic, "partition": lag.partition,
                     "current_offset": lag.committed_offset,
                     "log_end_offset": lag.log_end_offset, "lag": lag.lag,
                     "lag_seconds": lag.lag_seconds,
                     "consumer_id": lag.member_id,
                     "host": members[lag.member_id].client_host
                     if lag.member_id in members else None,
                     "client_id": members[lag.member_id].client_id
                     if lag.member_id in members else None}
                    for lag in d.partitions],
    }


def _with_kgroups_figures(client: KafkaWireClient,
                          d: admin.GroupDescription) -> admin.GroupDescription:
    """Lag in seconds (a Fetch per partition behind), and the last rebalance's cause where
    the broker is kgroups."""
    return replace(lag_reader.with_lag_seconds(client, d),
                   last_rebalance=admin.last_rebalance(client, d.group_id))


Description = admin.GroupDescription | StreamsGroupDescription | ShareGroupDescription


def _describe_one(client: KafkaWireClient, group: str, args: argparse.Namespace) -> Description:
    """The group as a share group when --type share says so; else as a classic or consumer
    group (DescribeGroups / ConsumerGroupDescribe), and, if there is none such, as the streams
    group (StreamsGroupDescribe) or the share group it may be."""
    if args.type is not None:
        return describe_share(client, group, args)
    coordinator = admin.connect_to_coordinator(client, group)
    try:
        return _with_kgroups_figures(coordinator, admin.describe_group(coordinator, group))
    except admin.GroupNotFoundError:
        streams = streams_admin.describe_streams_group(coordinator, group)
        if streams is not None:
            return streams
        try:
            return describe_share(client, group, args)
        except (ShareGroupNotFoundError, WireError):
            pass  # not a share group either (or a broker without them): not found as asked
        raise


def _run_describe(client: KafkaWireClient, args: argparse.Namespace) -> int:
    found: list[Description] = []
    missing = []
    for group in _groups(client, args, at_most_one=False):
        try:
            described = _describe_one(client, group, args)
        except (admin.GroupNotFoundError, ShareGroupNotFoundError) as exc:
            missing.append(str(exc))
            continue
        found.append(described)
        if args.output == "json":
            continue
        match described:
            case StreamsGroupDescription():
                print_streams_description(described, state=args.state is not None,
                                          members=args.members, verbose=args.verbose)
            case ShareGroupDescription():
                print_share_group(described, args)
            case admin.GroupDescription():
                _print_description(described, args)
    if args.output == "json":
        print_json([streams_description_json(d) if isinstance(d, StreamsGroupDescription)
                    else share_group_json(d) if isinstance(d, ShareGroupDescription)
                    else _description_json(d) for d in found])
    for message in missing:
        print(f"Error: {message}", file=sys.stderr)
    return 1 if missing else 0


# ---------------------------------------------------------------------------- --delete

def _run_delete(client: KafkaWireClient, args: argparse.Namespace) -> int:
    outcome: dict[str, str | None] = {}
    for group in _groups(client, args, at_most_one=False):
        try:
            admin.delete_group(admin.connect_to_coordinator(client, group), group)
            outcome[group] = None
        except admin.AdminError as exc:
            outcome[group] = str(exc)
    if args.output == "json":
        print_json([{"group": g, "error": e} for g, e in outcome.items()])
    else:
        deleted = [g for g, error in outcome.items() if error is None]
        if deleted:
            print(f"Deletion of requested consumer groups ({', '.join(map(repr, deleted))}) "
                  "was successful.")
        for group, error in outcome.items():
            if error is not None:
                print(f"Error: deletion of group {group!r} failed: {error}", file=sys.stderr)
    return 1 if any(outcome.values()) else 0


# --------------------------------------------------------------------- --reset-offsets

def _reset_target(args: argparse.Namespace) -> ResetTarget:
    given = [mode for mode in RESET_MODES if getattr(args, mode) not in (None, False)]
    if len(given) != 1:
        raise UsageError("choose one reset specification: --to-datetime, --by-duration, "
                         "--to-earliest, --to-latest, --shift-by, --from-file, --to-current, "
                         "--to-offset")
    if args.to_earliest:
        return ResetTarget("earliest")
    if args.to_latest:
        return ResetTarget("latest")
    if args.to_current:
        return ResetTarget("current")
    if args.to_offset is not None:
        return ResetTarget("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetTarget("shift", args.shift_by)
    if args.to_datetime is not None:
        moment = parse_datetime(args.to_datetime)
        print(f"--to-datetime {args.to_datetime} is "
              f"{moment.isoformat(timespec='milliseconds')} ({zone_note(args.to_datetime)})",
              file=sys.stderr)
        return ResetTarget("timestamp", int(moment.timestamp() * 1000))
    if args.by_duration is not None:
        return ResetTarget("timestamp", timestamp_before_now(parse_duration_ms(args.by_duration)))
    try:
        text = Path(args.from_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise admin.AdminError(f"cannot read {args.from_file}: {exc.strerror}") from None
    return ResetTarget("file", from_file=read_offsets_csv(text))


def _run_reset(client: KafkaWireClient, args: argparse.Namespace) -> int:
    target: ResetTarget = args.reset_target
    groups = _groups(client, args, at_most_one=False)
    topics = None if args.all_topics else list(args.topic)
    plans = []
    for group in groups:
        coordinator = admin.connect_to_coordinator(client, group)
        plan = plan_reset(coordinator, group, topics, target)
        if args.execute:
            admin.execute_reset(coordinator, group, plan.resets)
        plans.append((group, plan))
    for _, plan in plans:
        for note in plan.notes:
            print(note, file=sys.stderr)
    if not args.execute:
        print("Dry run: nothing committed (add --execute to apply).", file=sys.stderr)
    rows = [(group, r) for group, plan in plans for r in plan.resets]
    if args.export:
        if len(groups) == 1:
            sys.stdout.write(export_csv([r for _, r in rows]))
        else:
            sys.stdout.write("".join(f"{g},{r.topic},{r.partition},{r.new_offset}\n"
                                     for g, r in rows))
    elif args.output == "json":
        print_json([{"group": g, "topic": r.topic, "partition": r.partition,
                     "current_offset": r.current_offset, "new_offset": r.new_offset}
                    for g, r in rows])
    else:
        print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                    [[g, r.topic, r.partition, r.current_offset, r.new_offset]
                     for g, r in rows]))
    return 0


# -------------------------------------------------------------------- --delete-offsets

def _run_delete_offsets(client: KafkaWireClient, args: argparse.Namespace) -> int:
    (group,) = _groups(client, args, at_most_one=True)
    if not args.topic:
        raise UsageError("--delete-offsets needs --topic TOPIC[:P,...] (repeatable)")
    coordinator = admin.connect_to_coordinator(client, group)
    outcome = admin.delete_offsets(coordinator, group, list(args.topic))
    if args.output == "json":
        print_json([asdict(d) for d in outcome])
    else:
        print(f"Request succeeded for deleting offsets from group {group}.")
        print()
        print(table(["TOPIC", "PARTITION", "STATUS"],
                    [[d.topic, d.partition, "Successful" if d.error is None
                      else f"Error: {d.error}"] for d in outcome]))
    return 1 if any(d.error for d in outcome) else 0


RUNNERS: dict[str, Callable[[KafkaWireClient, argparse.Namespace], int]] = {
    "list": _run_list, "describe": _run_describe, "delete": _run_delete,
    "reset-offsets": _run_reset, "delete-offsets": _run_delete_offsets,
}


def _check_options(action: str, args: argparse.Namespace) -> None:
    """Before connecting: Kafka's tool refuses options that belong to another action or do not
    go together; so does this one."""
    if action == "describe":
        if sum(1 for flag in (args.members, args.offsets, args.state is not None) if flag) > 1:
            raise UsageError("--describe takes at most one of --members, --offsets, --state")
        if any(args.state or ()):
            raise UsageError("--state takes no value with --describe")
    if action == "list":
        _names(args.state, GROUP_STATES, "state")
        _names(args.type, GROUP_TYPES, "type")
    if action == "reset-offsets":
        if args.dry_run and args.execute:
            raise UsageError("--dry-run and --execute cannot be used together")
        if args.all_topics and args.topic:
            raise UsageError("--all-topics and --topic cannot be used together")
        args.reset_target = _reset_target(args)
        if not args.all_topics and not args.topic and args.reset_target.mode != "file":
            raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    if action != "describe" and (args.members or args.offsets or args.verbose):
        raise UsageError("--members, --offsets and --verbose go with --describe only")
    if action == "describe" and args.type is not None and _names(
            args.type, GROUP_TYPES, "type") != ("Share",):
        raise UsageError("--type goes with --describe only as --type share")
    if action not in ("list", "describe") and args.type is not None:
        raise UsageError("--type goes with --list or --describe only")
    if action not in ("list", "describe") and args.state is not None:
        raise UsageError("--state goes with --list or --describe only")
    reset_only = [name for name in (*RESET_MODES, "all_topics", "dry_run", "execute", "export")
                  if getattr(args, name) not in (None, False)]
    if action != "reset-offsets" and reset_only:
        raise UsageError(f"--{reset_only[0].replace('_', '-')} goes with --reset-offsets only")
    if action not in ("reset-offsets", "delete-offsets") and args.topic:
        raise UsageError("--topic goes with --reset-offsets or --delete-offsets only")


def _positive_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of ms") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of ms")
    return value


def _command(args: argparse.Namespace) -> int:
    try:
        action = _action(args)
        _check_options(action, args)
        with connect_tool(args.bootstrap_server, args.command_config,
                          timeout=args.timeout / 1000) as client:
            return run_to_pipe(lambda: RUNNERS[action](client, args))
    except UsageError as exc:
        print(f"kgroups groups: error: {exc}", file=sys.stderr)
        return 2
    except (WireError, admin.AdminError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = admin_command(
        subparsers, "groups",
        "kafka-consumer-groups over the Kafka wire: list, describe, delete groups, reset or "
        "delete their offsets",
        "Kafka's kafka-consumer-groups for any Kafka-compatible broker. Name one "
        "action (--list, --describe, --delete, --reset-offsets, --delete-offsets) "
        "or, in the older form, the action word followed by groups: "
        "`kgroups groups describe GROUP...`.")
    add = parser.add_argument
    add("words", nargs="*", metavar="[ACTION [GROUP ...]]",
        help=f"older form: an action ({', '.join(ACTIONS)}) and the groups it acts on")
    add("--timeout", type=_positive_ms, default=5000, metavar="MS",
        help="how long to wait for each answer of the broker, in milliseconds "
             "(kafka-consumer-groups' option and default)")
    add("--list", action="store_true", help="list the groups")
    add("--describe", action="store_true",
        help="describe groups: offsets and lag (default), --members or --state")
    add("--delete", action="store_true", help="delete empty groups and their offsets")
    add("--reset-offsets", action="store_true",
        help="reset an inactive group's offsets (a dry run unless --execute)")
    add("--delete-offsets", action="store_true",
        help="delete a group's offsets of some topics (one group at a time)")
    add("--group", action="append", default=[], metavar="GROUP",
        help="a group to act on (repeatable)")
    add("--all-groups", action="store_true", help="act on every group")
    add("--members", action="store_true", help="with --describe: the group's members")
    add("--offsets", action="store_true",
        help="with --describe: partitions with committed offset, log end and lag (the default)")
    add("--state", action="append", nargs="?", const="", metavar="STATE[,STATE...]",
        help="with --describe: the group's coordinator, strategy, state and size; with --list: "
             f"show states, or only groups in these ({', '.join(GROUP_STATES)}; any case)")
    add("--type", action="append", nargs="?", const="", metavar="TYPE[,TYPE...]",
        help=f"with --list: show group types, or only these ({', '.join(GROUP_TYPES)}); with "
             "--describe, `--type share`: describe share groups as kafka-share-groups does")
    add("--verbose", action="store_true",
        help="with --describe: more columns (leader epochs, member epochs and assignments)")
    add("--topic", action="append", type=parse_topic, default=[], metavar="TOPIC[:P,P...]",
        help="with --reset-offsets or --delete-offsets: a topic, optionally some of its "
             "partitions (repeatable)")
    add("--all-topics", action="store_true",
        help="with --reset-offsets: every topic the group has committed offsets for")
    modes = parser.add_argument_group("reset specifications (--reset-offsets: choose one)")
    modes.add_argument("--to-earliest", action="store_true", help="the log start offset")
    modes.add_argument("--to-latest", action="store_true", help="the log end offset")
    modes.add_argument("--to-current", action="store_true",
                       help="the committed offset (the log end where there is none)")
    modes.add_argument("--to-offset", type=int, metavar="N",
                       help="offset N (moved into the log when outside it, with a warning)")
    modes.add_argument("--shift-by", type=int, metavar="N",
                       help="the committed offset plus N (N may be negative)")
    modes.add_argument("--to-datetime", metavar="YYYY-MM-DDThh:mm:ss.sss[ZONE]",
                       help="the first offset at or after this time; without a zone (Z, "
                            "+hh:mm) the machine's local zone, as in Kafka's tool")
    modes.add_argument("--by-duration", metavar="PnDTnHnMnS",
                       help="the first offset at or after now minus this duration")
    modes.add_argument("--from-file", metavar="CSV",
                       help="offsets from a CSV file as --export writes it (topic,partition,"
                            "offset); its partitions are the scope unless --topic is given")
    add("--dry-run", action="store_true",
        help="with --reset-offsets: show the new offsets, commit nothing (the default)")
    add("--execute", action="store_true", help="with --reset-offsets: commit the new offsets")
    add("--export", action="store_true",
        help="with --reset-offsets: print the plan as CSV that --from-file reads back")
    add("--output", choices=("text", "json"), default="text",
        help="text tables as Kafka's tool prints them, or JSON for scripts")
    parser.set_defaults(run=_command)
