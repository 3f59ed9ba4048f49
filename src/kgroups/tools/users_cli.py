"""`kgroups users`: SCRAM credentials over the wire (AlterUserScramCredentials,
DescribeUserScramCredentials), what `kafka-configs --entity-type users` does for SCRAM. The
password is salted and iterated here, as Kafka's tool does: it never reaches the broker."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from kio.schema.alter_user_scram_credentials.v0 import request as alter
from kio.schema.describe_user_scram_credentials.v0 import request as describe
from kio.static.primitive import i8

from kgroups.broker.security.scram import (
    DEFAULT_ITERATIONS,
    MECHANISM_IDS,
    MECHANISM_NAMES,
    salted_password,
)
from kgroups.tools.cli_output import table
from kgroups.tools.client_security import admin_command, connect_tool
from kgroups.tools.wire_client import KafkaWireClient, WireError


def _alter(client: KafkaWireClient, args: argparse.Namespace) -> None:
    mechanisms = args.mechanism or list(MECHANISM_IDS)
    if args.add:
        password = args.password if args.password is not None else getpass.getpass(
            f"Password for {args.add}: ")
        upsertions = []
        for mechanism in mechanisms:
            salt = os.urandom(32)
            upsertions.append(alter.ScramCredentialUpsertion(
                name=args.add, mechanism=i8(MECHANISM_IDS[mechanism]), iterations=args.iterations,
                salt=salt, salted_password=salted_password(mechanism, password, salt,
                                                           args.iterations)))
        request = alter.AlterUserScramCredentialsRequest(deletions=(),
                                                         upsertions=tuple(upsertions))
    else:
        request = alter.AlterUserScramCredentialsRequest(upsertions=(), deletions=tuple(
            alter.ScramCredentialDeletion(name=args.delete, mechanism=i8(MECHANISM_IDS[m]))
            for m in mechanisms))
    for result in client.call(request).results:
        if int(result.error_code) != 0:
            raise WireError(f"{result.user}: {result.error_message}")
    print(f"Completed updating SCRAM credentials for user {args.add or args.delete}.")


def _list(client: KafkaWireClient, names: list[str]) -> None:
    response = client.call(describe.DescribeUserScramCredentialsRequest(
        users=tuple(describe.UserName(name=name) for name in names) if names else None))
    if int(response.error_code) != 0:
        raise WireError(response.error_message or f"error {int(response.error_code)}")
    rows = []
    for result in response.results:
        if int(result.error_code) != 0:
            raise WireError(f"{result.user}: {result.error_message}")
        rows += [(result.user, MECHANISM_NAMES.get(int(info.mechanism), "UNKNOWN"),
                  int(info.iterations)) for info in result.credential_infos]
    print(table(("USER", "MECHANISM", "ITERATIONS"), rows))


def _command(args: argparse.Namespace) -> int:
    if sum(bool(x) for x in (args.add, args.delete, args.list)) != 1:
        print("kgroups users: error: name one action: --add USER, --delete USER or --list",
              file=sys.stderr)
        return 2
    try:
        with connect_tool(args.bootstrap_server, args.command_config) as client:
            if args.list:
                _list(client, args.user)
            else:
                _alter(client, args)
        return 0
    except WireError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = admin_command(
        subparsers, "users", "SCRAM users over the Kafka wire: add, delete, list credentials",
        "Manage SCRAM-SHA-256/512 credentials on any Kafka-compatible broker "
        "(what kafka-configs --entity-type users --alter --add-config "
        "'SCRAM-SHA-256=[password=...]' does).")
    add = parser.add_argument
    add("--add", metavar="USER", help="add or replace USER's credentials")
    add("--delete", metavar="USER", help="delete USER's credentials")
    add("--list", action="store_true", help="list users and their mechanisms")
    add("--user", action="append", default=[], help="with --list: only this user (repeatable)")
    add("--mechanism", action="append", choices=sorted(MECHANISM_IDS),
        help="SCRAM mechanism (repeatable; default both)")
    add("--password", help="the password (asked for when not given)")
    add("--iterations", type=int, default=DEFAULT_ITERATIONS,
        help="PBKDF2 iterations (Kafka accepts 4096 to 16384)")
    parser.set_defaults(run=_command)
