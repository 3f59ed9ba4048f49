"""Value classes: frozen for the type checker, plain slots classes at run time.

The coordinator builds a dozen small messages and records per request (an OffsetCommit's
request, key, value, record, write, answer, reply...). `dataclass(frozen=True)` enforces
immutability at run time by setting every field through `object.__setattr__` in `__init__`,
which makes such an object four to five times as dear to build as a plain slots class (1.3
against 0.3 µs for eight fields); built frozen, the thirteen of an offset commit took about a
tenth of the broker's CPU for it (bench/RESULTS.md).
`value_class` gives the type checker a frozen dataclass (assigning to a field is an error in
`make test`'s mypy run) and the run time a plain slots dataclass, compared and hashed by its
fields as the frozen one is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

ValueClass = TypeVar("ValueClass")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value_class(cls: type[ValueClass]) -> type[ValueClass]:
    """`@dataclass(frozen=True, slots=True)` as the type checker sees it; see the module."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
