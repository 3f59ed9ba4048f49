"""The source of one function kgroups writes at run time (an entity's encoder, a request's frame
check): the encoder and the frame check each walk a kio class's fields once and emit straight-line
code for them, so both need the same small kit: indented lines, constants the lines refer to by
name, and the compiled function."""

from __future__ import annotations

from typing import Any


class FunctionSource:
    """Lines of one function and the namespace its names resolve in."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.namespace = namespace

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def constant(self, value: Any) -> str:
        """A name for `value` in the function's namespace, for a line to use."""
        name = f"_c{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def define(self, head: list[str], tail: list[str], name: str, filename: str) -> Any:
        """Compile `head`, the emitted lines and `tail`; the function `name` they define."""
        source = "\n".join([*head, *self.lines, *tail])
        exec(compile(source, filename, "exec"), self.namespace)
        return self.namespace[name]
