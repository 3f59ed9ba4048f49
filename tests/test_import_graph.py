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
    "log": frozenset({"errors"}),
    # `kgroups offsets dump postgresql://...` reads a store's __consumer_offsets.
    "records": frozenset({"errors", "log", "storage"}),
    # A cluster's store (PostgreSQL) beside the local log, whose formats it keeps.
    "storage": frozenset({"errors", "log"}),
    "assignors": frozenset({"errors", "records"}),
    # The consumer protocol's server-side assignment runs kgroups' assignors in the coordinator.
    "coordinator": frozenset({"errors", "log", "records", "assignors"}),
    # In cluster mode the broker keeps its state in the store and leads by its leases.
    "broker": frozenset({"errors", "log", "records", "coordinator", "assignors", "storage"}),
    # `kgroups analyze postgresql://...` lists a store with it before Spark reads it.
    "pipeline": frozenset({"errors", "log", "records", "storage"}),
    # kgroups' own admin commands (groups, topics, acls, users) speak the Kafka wire as a client,
    # with the broker's codec (wire), config reading, SCRAM and ACL types.
    "tools": frozenset({"errors", "log", "records", "coordinator", "assignors", "broker"}),
    "cli": frozenset({"errors", "log", "records", "coordinator", "assignors", "broker",
                      "tools", "pipeline", "storage"}),
    # The broker for tests (serve_in_background, the pytest plugin).
    "testing": frozenset({"errors", "log", "records", "coordinator", "assignors", "broker"}),
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
