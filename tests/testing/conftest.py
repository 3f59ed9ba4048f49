"""The tests here use the `kafka_broker` of kgroups' pytest plugin, as a user's tests would;
the repository's root conftest.py gives that name to a real Apache Kafka for the other tests,
and a directory's conftest.py overrides its parent's.

They run as a strict suite would (`-W error`): a warning, an unclosed socket's ResourceWarning
or an exception in the broker's thread fails the test that caused it."""

from pathlib import Path

import pytest

from kgroups.testing.pytest_plugin import kafka_broker

__all__ = ["kafka_broker"]

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.filterwarnings("error"))
