"""Fixtures for the admin tools' tests: the brokers they talk to (tests/broker/servers.py)."""

from tests.broker.servers import (
    inprocess_broker,
    kgroups_server,
    make_inprocess_broker,
    start_kgroups_server,
)

__all__ = ["inprocess_broker", "kgroups_server", "make_inprocess_broker", "start_kgroups_server"]
