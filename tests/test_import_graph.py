"""Dependencies point down: log at the bottom, records on it, the coordinator and the
assignors above, the broker and the pipeline on top, the admin tools over the broker, the
command line over everything; no module imports itself back through others. Imports are read
from the source (every import statement, type-checking-only and function-local ones included),
so neither can hide behind a lazy import."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# Each top-level part and the parts below it that it may import.
LAYERS: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    # Value classes (`value_class`): the messages and records the coordinator builds.
    "immutable": frozenset(),
    "log": frozenset({"errors"}),
    # `kgroups offsets dump postgresql://...` reads a store's __consumer_offsets.
    "records": frozenset({"errors", "immutable", "log", "storage"}),
    # A cluster's store (PostgreSQL) beside the local log, whose formats it keeps.
    "storage": frozenset({"errors", "log"}),
    "assignors": frozenset({"errors", "records"}),
    # The consumer protocol's server-side assignment runs kgroups' assignors in the coordinator.
    "coordinator": frozenset({"errors", "immutable", "log", "records", "assignors"}),
    # The transaction coordinator: beside the group coordinator, whose placement rule it shares.
    "transactions": frozenset({"errors", "log", "records", "coordinator"}),
    # Share groups' partitions (acquisition, acknowledgement, delivery counts): sans-IO.
    "share": frozenset({"errors", "log", "records"}),
    # The share coordinator (`__share_group_state`), placed as the group coordinator places.
    "share_coordinator": frozenset({"errors", "log", "records", "coordinator", "share"}),
    # A cluster broker keeps its topics, records and catalog in the store.
    "broker": frozenset({"errors", "log", "records", "coordinator", "transactions", "assignors",
                         "storage", "share", "share_coordinator"}),
    # `kgroups analyze postgresql://...` lists a store with it before Spark reads it.
    # `kgroups analyze` rebuilds share-partition state with the share coordinator's replay.
    "pipeline": frozenset({"errors", "log", "records", "storage", "share", "share_coordinator"}),
    # kgroups' own admin commands (groups, topics, acls, users) speak the Kafka wire as a client,
    # with the broker's codec (wire), config reading, SCRAM and ACL types.
    "tools": frozenset({"errors", "log", "records", "coordinator", "transactions", "assignors",
                        "share", "share_coordinator",
                        "broker"}),
    "cli": frozenset({"errors", "log", "records", "coordinator", "transactions", "assignors",
                      "share", "share_coordinator",
                      "broker", "tools", "pipeline", "storage", "member", "simulate"}),
    # The client side of a group (sans-IO members) sits on the coordinator's messages.
    "member": frozenset({"errors", "log", "records", "coordinator", "assignors"}),
    # The simulator drives members against the real coordinator core. --from-history reads a
    # group's history with the pipeline, and its --timeline picture is the pipeline's ownership
    # picture (pipeline/ownership_picture.py), drawn once for both (never the other way round).
    "simulate": frozenset({"errors", "log", "records", "coordinator", "assignors", "member",
                           "pipeline"}),
    # The load generator drives the same members against a real broker over the wire, framed
    # with the broker's codec.
    "loadgen": frozenset({"errors", "log", "records", "coordinator", "assignors", "member",
                          "broker"}),
    # The broker for tests (serve_in_background, the pytest plugin).
    "testing": frozenset({"errors", "log", "records", "coordinator", "transactions", "assignors",
                          "broker"}),
    # The package itself: `kgroups.serve_in_background`, loaded on first use.
    "kgroups": frozenset({"testing"}),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("kgroups"):
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("kgroups"))


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in (SRC / "kgroups").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {t for t in _imports(path) if t in modules and t != name}
    return graph


def _part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_parts_import_only_the_parts_below_them() -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items() for target in targets
        if _part(module) != _part(target) and _part(target) not in LAYERS[_part(module)]
    )
    assert upward == []


def test_no_module_imports_itself_back() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


# What the coordinator may not touch: it is a state machine over requests, time and ids that its
# caller passes in, so that every rule replays the same way from a test's explicit clock.
FORBIDDEN_IN_COORDINATOR = frozenset({
    "asyncio", "socket", "os", "multiprocessing", "threading", "concurrent", "time", "random",
    "selectors", "subprocess", "shutil", "tempfile", "io", "pathlib",
})
# Fresh ids are random: the caller injects their source. `uuid.UUID` itself is a value type (a
# topic id is one) and may be used; only the generators may not.
UUID_GENERATORS = frozenset({"uuid1", "uuid3", "uuid4", "uuid5", "getnode"})


def _io_uses(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_IN_COORDINATOR:
                    yield f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in FORBIDDEN_IN_COORDINATOR:
                yield f"from {node.module} import ..."
            if node.module == "uuid":
                yield from (f"from uuid import {a.name}" for a in node.names
                            if a.name in UUID_GENERATORS)
        elif isinstance(node, ast.Attribute) and node.attr in UUID_GENERATORS:
            if isinstance(node.value, ast.Name) and node.value.id == "uuid":
                yield f"uuid.{node.attr}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "open":
            yield "open()"


def test_the_coordinator_does_no_io_and_draws_no_random_ids() -> None:
    """No module under kgroups/coordinator or kgroups/transactions (the two coordinators)
    imports an I/O, clock, randomness or concurrency
    module (asyncio, socket, os, multiprocessing, threading, concurrent, time, random...),
    opens a file, or calls a uuid generator: time comes with each call and ids from the id
    source its caller passes. The `uuid.UUID` value type stays allowed: topic ids are UUIDs."""
    uses = sorted(
        f"{path.relative_to(SRC)}: {use}"
        for package in ("coordinator", "transactions")
        for path in (SRC / "kgroups" / package).rglob("*.py")
        for use in _io_uses(path)
    )
    assert uses == []


def test_the_io_rule_catches_what_it_forbids(tmp_path: Path) -> None:
    """The rule above is not vacuous: each kind of use it forbids is found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os.path\nfrom time import monotonic\nimport uuid\nfrom uuid import uuid4\n"
        "x = uuid.uuid4()\ny = uuid.UUID(int=1)\nopen('f')\n")
    assert sorted(_io_uses(sample)) == [
        "from time import ...", "from uuid import uuid4", "import os.path", "open()",
        "uuid.uuid4"]
