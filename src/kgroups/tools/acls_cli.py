"""`kgroups acls`: Kafka's kafka-acls over the wire (CreateAcls, DescribeAcls, DeleteAcls), with
its options and its output, so scripts written for kafka-acls work against any broker."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence

from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.static.primitive import i8

from kgroups.broker.security.authorizer import (
    CLUSTER_NAME,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kgroups.tools.client_security import admin_command, connect_tool
from kgroups.tools.wire_client import KafkaWireClient, WireError

# kafka-acls' operation names, e.g. --operation DescribeConfigs.
OPERATIONS = {"".join(part.capitalize() for part in op.name.split("_")): op
              for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)}
PATTERNS = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED,
            "match": PatternType.MATCH, "any": PatternType.ANY}


class UsageError(Exception):
    pass


def _resource_text(kind: int, name: str, pattern: int) -> str:
    return (f"ResourcePattern(resourceType={ResourceType(kind).name}, name={name}, "
            f"patternType={PatternType(pattern).name})")


def _acl_text(acl: AclBinding) -> str:
    return (f"(principal={acl.principal}, host={acl.host}, "
            f"operation={Operation(acl.operation).name}, "
            f"permissionType={Permission(acl.permission).name})")


def _print_grouped(title: str, acls: Iterable[AclBinding]) -> None:
    """kafka-acls' layout: one block per resource pattern, one ACL per line."""
    grouped: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for acl in acls:
        grouped[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(acl)
    for (kind, name, pattern), members in grouped.items():
        print(f"{title} `{_resource_text(kind, name, pattern)}`:")
        print("".join(f"\t{_acl_text(acl)}\n" for acl in members))


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, name) for name in args.topic]
    resources += [(ResourceType.GROUP, name) for name in args.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    """What --add/--remove mean: every principal x host x operation on every resource, with
    --producer and --consumer expanding as kafka-acls expands them."""
    pattern = PATTERNS[args.resource_pattern_type]
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("A '--resource-pattern-type' value of 'literal' or 'prefixed' is "
                         "required with --add or --remove")
    resources = _resources(args)
    if not resources:
        raise UsageError("You must provide at least one resource: --topic <topic> or "
                         "--cluster or --group <group> or --transactional-id <id>")
    wanted: list[tuple[ResourceType, str, Operation]] = []
    for kind, name in resources:
        if args.producer and kind == ResourceType.TOPIC:
            wanted += [(kind, name, op) for op in (Operation.WRITE, Operation.DESCRIBE,
                                                   Operation.CREATE)]
        elif args.consumer and kind in (ResourceType.TOPIC, ResourceType.GROUP):
            ops = (Operation.READ, Operation.DESCRIBE) if kind == ResourceType.TOPIC \
                else (Operation.READ,)
            wanted += [(kind, name, op) for op in ops]
        elif not (args.producer or args.consumer):
            wanted += [(kind, name, OPERATIONS[op]) for op in args.operation or ["All"]]
    entries = [(principal, host, Permission.ALLOW) for principal in args.allow_principal
               for host in args.allow_host or ["*"]]
    entries += [(principal, host, Permission.DENY) for principal in args.deny_principal
                for host in args.deny_host or ["*"]]
    if not entries and args.action == "add":
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when "
                         "trying to add ACLs.")
    return [AclBinding(kind, name, pattern, principal, host, operation, permission)
            for kind, name, operation in wanted for principal, host, permission in entries]


def _describe(client: KafkaWireClient, kind: int = ResourceType.ANY, name: str | None = None,
              pattern: int = PatternType.ANY, principal: str | None = None) -> list[AclBinding]:
    response = client.call(describe_acls.DescribeAclsRequest(
        resource_type_filter=i8(kind), resource_name_filter=name,
        pattern_type_filter=i8(pattern), principal_filter=principal, host_filter=None,
        operation=i8(Operation.ANY), permission_type=i8(Permission.ANY)))
    if int(response.error_code) != 0:
        raise WireError(response.error_message or f"error {int(response.error_code)}")
    return [AclBinding(int(r.resource_type), r.resource_name, int(r.pattern_type),
                       a.principal, a.host, int(a.operation), int(a.permission_type))
            for r in response.resources for a in r.acls]


def _list(client: KafkaWireClient, args: argparse.Namespace) -> None:
    pattern = PATTERNS[args.resource_pattern_type]
    principals = args.principal or [None]
    resources: Sequence[tuple[int, str | None]] = _resources(args) or [(ResourceType.ANY, None)]
    for principal in principals:
        found = [acl for kind, name in resources
                 for acl in _describe(client, kind, name, pattern, principal)]
        if principal is not None:
            by_resource = defaultdict(list)
            for acl in found:
                by_resource[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(acl)
            print(f"ACLs for principal `{principal}`")
            for (kind, name, pat), members in by_resource.items():
                print(f"Current ACLs for resource `{_resource_text(kind, name, pat)}`:")
                print("".join(f"\t{_acl_text(acl)}\n" for acl in members))
        else:
            _print_grouped("Current ACLs for resource", found)


def _filter_of(acl: AclBinding) -> delete_acls.DeleteAclsFilter:
    return delete_acls.DeleteAclsFilter(
        resource_type_filter=i8(acl.resource_type), resource_name_filter=acl.resource_name,
        pattern_type_filter=i8(acl.pattern_type), principal_filter=acl.principal,
        host_filter=acl.host, operation=i8(acl.operation), permission_type=i8(acl.permission))


def _run(client: KafkaWireClient, args: argparse.Namespace) -> int:
    if args.action == "list":
        _list(client, args)
        return 0
    bindings = _bindings(args)
    if args.action == "add":
        _print_grouped("Adding ACLs for resource", bindings)
        results = client.call(create_acls.CreateAclsRequest(creations=tuple(
            create_acls.AclCreation(
                resource_type=i8(b.resource_type), resource_name=b.resource_name,
                resource_pattern_type=i8(b.pattern_type), principal=b.principal, host=b.host,
                operation=i8(b.operation), permission_type=i8(b.permission))
            for b in bindings))).results
    else:
        if not args.force:
            answer = input("Are you sure you want to remove ACLs: \n"
                           + "".join(f"\t{_acl_text(b)}\n" for b in bindings)
                           + " from resource filter? (y/n)")
            if answer.strip().lower() != "y":
                return 0
        results = client.call(delete_acls.DeleteAclsRequest(
            filters=tuple(_filter_of(b) for b in bindings))).filter_results
    failures = [r.error_message or f"error {int(r.error_code)}" for r in results
                if int(r.error_code) != 0]
    if failures:
        raise WireError("; ".join(dict.fromkeys(failures)))
    seen = dict.fromkeys((b.resource_type, b.resource_name, b.pattern_type) for b in bindings)
    for kind, name, pattern in seen:
        _print_grouped("Current ACLs for resource", _describe(client, kind, name, pattern))
    return 0


def _command(args: argparse.Namespace) -> int:
    actions = [name for name in ("add", "remove", "list") if getattr(args, name)]
    if len(actions) != 1:
        print("kgroups acls: error: name one action: --add, --remove or --list", file=sys.stderr)
        return 2
    args.action = actions[0]
    try:
        with connect_tool(args.bootstrap_server, args.command_config) as client:
            return _run(client, args)
    except UsageError as exc:
        print(f"kgroups acls: error: {exc}", file=sys.stderr)
        return 2
    except WireError as exc:
        print(f"Error while executing ACL command: {exc}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = admin_command(
        subparsers, "acls", "kafka-acls over the Kafka wire: add, list, remove ACLs",
        "Kafka's kafka-acls for any Kafka-compatible broker with an authorizer.")
    add = parser.add_argument
    add("--add", action="store_true", help="add ACLs")
    add("--remove", action="store_true", help="remove ACLs")
    add("--list", action="store_true", help="list ACLs (all, or of the resources given)")
    add("--topic", action="append", default=[], help="a topic (repeatable; '*' for all)")
    add("--group", action="append", default=[], help="a consumer group (repeatable)")
    add("--transactional-id", action="append", default=[], help="a transactional id")
    add("--cluster", action="store_true", help="the cluster")
    add("--resource-pattern-type", choices=sorted(PATTERNS), default="literal",
        help="how resource names match; list and remove also accept match and any")
    add("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
        help="principal the ACL allows, e.g. User:alice or User:*")
    add("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
        help="principal the ACL denies")
    add("--allow-host", action="append", default=[], help="host the allow applies to (*)")
    add("--deny-host", action="append", default=[], help="host the deny applies to (*)")
    add("--operation", action="append", choices=sorted(OPERATIONS), metavar="OPERATION",
        help=f"one of {', '.join(sorted(OPERATIONS))} (repeatable; default All)")
    add("--principal", action="append", default=[], help="with --list: only this principal's")
    add("--producer", action="store_true", help="Write, Describe, Create on the topics")
    add("--consumer", action="store_true", help="Read, Describe on the topics, Read on groups")
    add("--force", action="store_true", help="remove without asking")
    parser.set_defaults(run=_command)
