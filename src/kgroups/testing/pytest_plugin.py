"""The pytest plugin kgroups registers (entry point `pytest11`): a `kafka_broker` fixture, a
fresh kgroups broker per test with its logs in the test's tmp_path.

Settings, applied over kgroups.testing.TEST_SETTINGS, closest last:
- the `kafka_broker_settings` fixture (a dict, empty by default): override it in a conftest.py
  for a whole directory, or parametrize it (`indirect` not needed, it is a plain fixture);
- the `kafka_broker` marker on a module, class or test:
  `@pytest.mark.kafka_broker({"offsets.retention.minutes": "1"})`, or with keyword arguments
  whose underscores stand for dots: `@pytest.mark.kafka_broker(offsets_retention_minutes=1)`.

A project that already has a fixture named `kafka_broker` keeps it: a conftest.py fixture
overrides a plugin's. `-p no:kgroups` turns the plugin off. The broker is imported when a
test first asks for it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kgroups.testing.background import BackgroundBroker

MARKER = "kafka_broker"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(settings=None, **key_value): Kafka broker settings for the kafka_broker "
        "fixture (keyword names use _ for .)",
    )


def marker_settings(node: pytest.Item) -> dict[str, str]:
    """The settings of every `kafka_broker` marker on `node`, the closest one winning."""
    merged: dict[str, str] = {}
    for marker in reversed(list(node.iter_markers(MARKER))):
        for mapping in marker.args:
            merged.update(_as_settings(mapping))
        merged.update({key.replace("_", "."): str(value) for key, value in marker.kwargs.items()})
    return merged


def _as_settings(mapping: Any) -> dict[str, str]:
    if not isinstance(mapping, Mapping):
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes a dict of settings, got {mapping!r}")
    return {str(key): str(value) for key, value in mapping.items()}


@pytest.fixture
def kafka_broker_settings() -> dict[str, str]:
    """Settings for `kafka_broker`, below the marker's; override this fixture to change them."""
    return {}


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest, tmp_path: Path,
                 kafka_broker_settings: Mapping[str, str]) -> Iterator[BackgroundBroker]:
    """A kgroups broker on a free 127.0.0.1 port, data in `tmp_path / "kgroups-data"`;
    `.bootstrap` is the `bootstrap.servers` string. Stopped after the test. A bad setting, or
    a name neither kgroups nor Kafka has (a typo: the message names the closest one), fails
    the test at set-up."""
    # Imported here: loading the broker takes most of a second, which a test run whose tests
    # never ask for the fixture should not pay.
    from kgroups.broker.config import ConfigError
    from kgroups.testing.background import serve_in_background

    settings = {**kafka_broker_settings, **marker_settings(request.node)}
    with contextlib.ExitStack() as stack:
        try:
            broker = stack.enter_context(
                serve_in_background(settings, data_dir=tmp_path / "kgroups-data"))
        except ConfigError as exc:  # the setting and what is wrong with it, not a traceback
            pytest.fail(f"kafka_broker: {exc}", pytrace=False)
        yield broker
