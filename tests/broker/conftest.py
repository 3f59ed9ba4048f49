"""Fixtures for broker tests: the brokers of tests/broker/servers.py (a real `kgroups serve`
subprocess and an in-process broker), offered to every test in this directory. Test modules
import the broker classes from tests.broker.servers: a bare `conftest` names whichever
directory's conftest pytest imported first."""

from tests.broker.servers import (
    inprocess_broker,
    kgroups_server,
    make_inprocess_broker,
    start_kgroups_server,
)

__all__ = ["inprocess_broker", "kgroups_server", "make_inprocess_broker", "start_kgroups_server"]
