"""`kgroups groups --describe --type share`: share groups (KIP-932) in the tables Kafka's
`kafka-share-groups --describe` prints, so an operator reads the same columns from either tool:
start offset and lag per share-partition (the default, or --offsets), the members with what each
is assigned (--members), or the group's coordinator, state and size (--state); --verbose adds
leader epochs, member epochs and the group's epochs. `kgroups groups --describe` also comes here
for a group that turns out to be a share group, so no one has to know a group's type first.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from kgroups.tools import admin
from kgroups.tools.cli_output import assignment_text, table
from kgroups.tools.share_admin import ShareGroupDescription, describe_share_group
from kgroups.tools.wire_client import KafkaWireClient


def print_share_group(d: ShareGroupDescription, args: argparse.Namespace) -> None:
    """One group's table, as Kafka's share-group tool prints it; its notes on stderr."""
    print()
    if not d.members and (args.members or args.state is not None):
        print(f"Share group '{d.group_id}' has no active members.", file=sys.stderr)
    if args.state is not None:
        host, port, node = d.coordinator
        print(table(["GROUP", "COORDINATOR (ID)", "STATE",
                     *(["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if args.verbose else []), "#MEMBERS"],
                    [[d.group_id, f"{host}:{port} ({node})", d.state,
                      *([d.group_epoch, d.assignment_epoch] if args.verbose else []),
                      len(d.members)]]))
    elif args.members:
        if d.members:
            print(table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                         *(["MEMBER-EPOCH"] if args.verbose else []), "ASSIGNMENT"],
                        [[d.group_id, m.member_id, m.client_host, m.client_id,
                          len(m.partitions), *([m.member_epoch] if args.verbose else []),
                          assignment_text(m.partitions)] for m in d.members]))
    elif not d.offsets:
        print(f"Share group '{d.group_id}' has no offset information.")
    else:
        print(table(["GROUP", "TOPIC", "PARTITION", *(["LEADER-EPOCH"] if args.verbose else []),
                     "START-OFFSET", "LAG"],
                    [[d.group_id, o.topic, o.partition,
                      *([o.leader_epoch] if args.verbose else []), o.start_offset, o.lag]
                     for o in d.offsets]))


def share_group_json(d: ShareGroupDescription) -> dict[str, object]:
    host, port, node = d.coordinator
    return {
        "group": d.group_id, "type": "Share", "state": d.state,
        "coordinator": {"host": host, "port": port, "id": node},
        "assignor": d.assignor, "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
        "members": [asdict(m) | {"partitions": [list(p) for p in m.partitions]}
                    for m in d.members],
        "offsets": [asdict(o) for o in d.offsets],
    }


def describe_share(client: KafkaWireClient, group: str,
                   args: argparse.Namespace) -> ShareGroupDescription:
    """The share group, asked of its coordinator; its offsets only where they are shown."""
    return describe_share_group(
        admin.connect_to_coordinator(client, group), group,
        with_offsets=args.output == "json" or not (args.members or args.state is not None))
