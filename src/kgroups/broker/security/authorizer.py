"""ACLs with Kafka's StandardAuthorizer semantics, kept durably.

A binding allows or denies one principal, from one host, one operation on resources named
literally, by prefix, or by the literal wildcard `*`. A request is authorized when the
principal is a super user, or when no matching DENY exists and a matching ALLOW does (Read,
Write, Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs); a resource
with no binding at all is decided by allow.everyone.if.no.acl.found. The numbers are Kafka's
wire codes (AclOperation, ResourceType, PatternType, AclPermissionType), so bindings travel
through CreateAcls/DescribeAcls/DeleteAcls unchanged.

Where the bindings live is an AclBook: a single node's JSON file (AclFile, replaced atomically)
or a cluster's store (cluster/catalog_books.StoreAcls), which every broker reads again
(`reload`) when the store's catalog version moves.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path
from typing import Protocol

from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.broker.security.durable_file import replace_durably
from kgroups.errors import ErrorCode

ACL_FILE = "security/acls.json"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
# authorizer.class.name values that turn authorization on (Kafka's KRaft and ZooKeeper names).
AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
})


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW for any of these also allows the key (Kafka's implied operations).
_IMPLIED_BY = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


# The operations Kafka reports on each resource type when a client asks for its authorized
# operations (AclEntry.supportedOperations); without an authorizer all of them are allowed.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: frozenset({
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
        Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({
        Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({
        Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
        Operation.DESCRIBE}),
}
# Kafka's answer in an authorized_operations field the client did not ask for.
OPERATIONS_NOT_REQUESTED = -(2**31)


def operations_bitfield(operations: Iterable[Operation]) -> int:
    """The wire form of a set of operations: bit `code` set for each."""
    bits = 0
    for operation in operations:
        bits |= 1 << operation
    return bits


def all_operations(resource_type: ResourceType) -> int:
    """The bitfield a broker without an authorizer answers: every supported operation."""
    return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])


def described_group_operations(asked: bool, error: ErrorCode) -> int:
    """A described group's `authorized_operations` before any ACL narrows it: all of them when
    the request asked and the group is answered, "not requested" otherwise (a group in error
    carries none)."""
    if asked and error == ErrorCode.NONE:
        return all_operations(ResourceType.GROUP)
    return OPERATIONS_NOT_REQUESTED


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def matches_resource(self, resource_type: int, name: str) -> bool:
        """Whether this binding applies to the resource (literal, `*`, or a prefix of it)."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.resource_name)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls/DeleteAcls' filter: None and ANY match everything."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = Operation.ANY
    permission: int = Permission.ANY

    def problem(self) -> str | None:
        """Kafka's message for a filter that can match nothing by construction."""
        if self.resource_type == ResourceType.UNKNOWN:
            return "Invalid resource type filter"
        if self.pattern_type == PatternType.UNKNOWN:
            return "Invalid pattern type filter"
        if self.operation == Operation.UNKNOWN:
            return "Invalid operation filter"
        if self.permission == Permission.UNKNOWN:
            return "Invalid permission type filter"
        return None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != Operation.ANY and acl.operation != self.operation:
            return False
        return self.permission == Permission.ANY or acl.permission == self.permission

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            return acl.matches_resource(acl.resource_type, self.resource_name)
        if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
            return False
        return self.resource_name is None or acl.resource_name == self.resource_name


def binding_problem(acl: AclBinding) -> str | None:
    """Why CreateAcls refuses a binding (Kafka's InvalidRequestException texts), or None."""
    if acl.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or \
            acl.resource_type not in set(ResourceType):
        return "Invalid resourceType " + str(acl.resource_type)
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + str(acl.pattern_type)
    if acl.operation in (Operation.ANY, Operation.UNKNOWN) or \
            acl.operation not in set(Operation):
        return "Invalid operation " + str(acl.operation)
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        return "Invalid permissionType " + str(acl.permission)
    if not acl.resource_name:
        return "Resource name should not be empty"
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{acl.principal}` (no colon is present " \
               "separating the principal type from the principal name)"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.host:
        return "Invalid host: the host must not be empty"
    return None


class AclBook(Protocol):
    """Where the bindings are kept: read whole, changed by what was added or removed."""

    def load(self) -> list[AclBinding]: ...

    def add(self, added: list[AclBinding], acls: list[AclBinding]) -> None:
        """Keep `added` durably (`acls`: every binding, them included)."""

    def remove(self, removed: list[AclBinding], acls: list[AclBinding]) -> None:
        """Drop `removed` durably (`acls`: every binding left)."""


class AclFile:
    """A single node's bindings: one JSON file, replaced atomically (write, fsync, rename)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def load(self) -> list[AclBinding]:
        if not self._path.exists():
            return []
        try:
            return [AclBinding(**entry)
                    for entry in json.loads(self._path.read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"cannot read the ACLs in {self._path}: {exc}") from None

    def add(self, added: list[AclBinding], acls: list[AclBinding]) -> None:
        self._write(acls)

    def remove(self, removed: list[AclBinding], acls: list[AclBinding]) -> None:
        self._write(acls)

    def _write(self, acls: list[AclBinding]) -> None:
        replace_durably(self._path, json.dumps([asdict(acl) for acl in acls], indent=1))


class Authorizer:
    """The bindings, super.users and allow.everyone.if.no.acl.found, and the decision."""

    def __init__(self, book: AclBook | Path, super_users: Iterable[str],
                 allow_if_no_acl: bool) -> None:
        """`book` a Path: a single node's ACL file."""
        self._book = AclFile(book) if isinstance(book, Path) else book
        self._lock = threading.Lock()
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls = self._book.load()
        self._index()

    def reload(self) -> None:
        """Read the bindings again (another broker of the cluster changed them)."""
        with self._lock:
            self._acls = self._book.load()
            self._index()

    def _index(self) -> None:
        """Literal bindings by (type, name), prefixed ones by type: a check then reads the few
        bindings that can apply instead of every binding, however many there are."""
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[int, list[AclBinding]] = {}
        for acl in self._acls:
            if acl.pattern_type == PatternType.LITERAL:
                self._literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
            else:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)

    @classmethod
    def from_config(cls, config: BrokerConfig, book: AclBook | None = None) -> Authorizer | None:
        """None when authorizer.class.name is unset: every request is allowed, as in Kafka.
        The bindings are in `book`, else in the data directory's ACL file."""
        name = config.properties.get("authorizer.class.name", "").strip()
        if not name:
            return None
        if name not in AUTHORIZER_CLASSES:
            raise ConfigError(f"authorizer.class.name={name}: kgroups implements "
                              "org.apache.kafka.metadata.authorizer.StandardAuthorizer only")
        supers = [item.strip() for item in
                  config.properties.get("super.users", "").split(";") if item.strip()]
        allow = config.properties.get("allow.everyone.if.no.acl.found", "false").strip()
        if allow.lower() not in ("true", "false"):
            raise ConfigError(f"allow.everyone.if.no.acl.found must be true or false, got {allow}")
        return cls(book or config.data_dir / ACL_FILE, supers, allow.lower() == "true")

    def acls(self) -> list[AclBinding]:
        return list(self._acls)

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = [*self._literal.get((resource_type, name), ()),
                    *(self._literal.get((resource_type, WILDCARD), ()) if name != WILDCARD
                      else ()),
                    *(acl for acl in self._prefixed.get(resource_type, ())
                      if name.startswith(acl.resource_name))]
        if not matching:
            return self.allow_if_no_acl
        mine = [acl for acl in matching
                if acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, "*")]
        if any(acl.permission == Permission.DENY and acl.operation in (operation, Operation.ALL)
               for acl in mine):
            return False
        allowed_by = _IMPLIED_BY.get(operation, frozenset({operation}))
        return any(acl.permission == Permission.ALLOW
                   and (acl.operation == Operation.ALL or acl.operation in allowed_by)
                   for acl in mine)

    def allowed_operations(self, principal: str, host: str, resource_type: ResourceType,
                           name: str) -> int:
        """The bitfield of the supported operations on the resource this principal is allowed,
        each decided as a request for it would be (implications, DENY, the no-ACL default)."""
        return operations_bitfield(
            operation for operation in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, operation, resource_type, name))

    def allowed_on_any(self, principal: str, host: str, operation: Operation,
                       resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType, as InitProducerId uses it: some ALLOW for the
        operation on a resource of the type (a DENY of that exact binding's resource name
        cancels it), or no binding of the type at all with allow.everyone.if.no.acl.found."""
        if principal in self.super_users:
            return True
        of_type = [acl for acl in self._acls if acl.resource_type == resource_type]
        if not of_type:
            return self.allow_if_no_acl
        return any(acl.permission == Permission.ALLOW
                   and acl.operation in (operation, Operation.ALL)
                   and acl.principal in (principal, WILDCARD_PRINCIPAL)
                   and acl.host in (host, "*")
                   and self.authorize(principal, host, operation, resource_type,
                                      acl.resource_name)
                   for acl in of_type if acl.pattern_type == PatternType.LITERAL)

    def create(self, bindings: list[AclBinding]) -> None:
        """Add the bindings, kept durably first (an OSError changes nothing)."""
        with self._lock:
            added = list(dict.fromkeys(b for b in bindings if b not in self._acls))
            acls = [*self._acls, *added]
            self._book.add(added, acls)
            self._acls = acls
            self._index()

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; per filter, the bindings it removed."""
        with self._lock:
            removed = [[acl for acl in self._acls if acl_filter.matches(acl)]
                       for acl_filter in filters]
            gone = {acl for group in removed for acl in group}
            if gone:
                kept = [acl for acl in self._acls if acl not in gone]
                self._book.remove([acl for acl in self._acls if acl in gone], kept)
                self._acls = kept
                self._index()
            return removed
