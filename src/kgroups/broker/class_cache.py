"""`functools.cache` for functions of one class (a kio request or response class): the codecs,
field lists and checkers built once per class. mypy reads `type[Any]` as unhashable
(python/mypy#11470) and refuses classes as keys of `functools.cache`; this says what the
cache takes, and is the same C-level cache at run time."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

Result = TypeVar("Result")


def class_cache(compute: Callable[[type[Any]], Result]) -> Callable[[type[Any]], Result]:
    return cast(Callable[[type[Any]], Result], functools.cache(compute))
