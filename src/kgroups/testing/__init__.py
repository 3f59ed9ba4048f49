"""A kgroups broker for tests: `serve_in_background` for any test runner, and (in
`kgroups.testing.pytest_plugin`, registered as a pytest plugin by the package) the
`kafka_broker` fixture built on it.

The broker runs in this process, in a background thread with its own event loop (uvloop when
installed), rather than as a `kgroups serve` subprocess: a thread starts in milliseconds where a
fresh interpreter spends most of a second importing, and a test gets the broker itself in hand.
The Broker keeps no module-level state, so several can run side by side. The thread shares the
GIL with the test: clients that block in C (confluent-kafka, librdkafka) or in socket calls
release it, so the broker keeps answering while a test waits on a consumer.

Importing this package needs neither pytest nor a running event loop, and loads the broker
(most of a second of imports) only when one of its names is first used: the pytest plugin
inside it is loaded by every pytest run of a project that installs kgroups."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TEST_SETTINGS", "BackgroundBroker", "serve_in_background"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("kgroups.testing.background"), name)
    raise AttributeError(f"module 'kgroups.testing' has no attribute {name!r}")
