"""Fixtures for broker tests: the brokers of tests/broker/servers.py (a real `kgroups serve`
subprocess and an in-process broker), offered to every test in this directory."""

from tests.broker.servers import (
    InProcessBroker,
    ServerProcess,
    inprocess_broker,
    kgroups_server,
    make_inprocess_broker,
    start_kgroups_server,
)

__all__ = ["InProcessBroker", "ServerProcess", "inprocess_broker", "kgroups_server",
           "make_inprocess_broker", "start_kgroups_server"]
