"""The compiled form of the per-partition steps of a sticky `kgroups assign` (checking the
scenario's members, writing every member's sticky user data, reading it back as claims,
reading cooperative members' owned partitions as claims, and each member's topic -> partitions
dict of the result), built from native/sticky_assign by
`make install`.

At Kafka's reference scale (a million partitions, 2,000 members) each of those steps in Python
creates or reads a Python object per partition, and they were most of what `kgroups assign`
spent. Where the compiled module is not built (`compiled` is None), the Python code beside
each call runs instead: it is also the reference the compiled code is tested against
(tests/assignors/test_native.py), and gives the same results.
"""

from __future__ import annotations

from types import ModuleType

compiled: ModuleType | None
try:
    import kgroups_sticky_assign

    compiled = kgroups_sticky_assign
except ImportError:
    compiled = None
