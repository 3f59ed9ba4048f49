"""kgroups.loadgen: thousands of light consumers against a real broker, over the Kafka wire.

The members are `kgroups.member`'s sans-IO state machines, the ones `kgroups simulate` drives on
a virtual clock; here an asyncio driver gives them real time and real connections: each member
has its own connection to the group's coordinator (Kafka reads a connection's requests one at a
time, so members sharing one would queue behind each other's parked JoinGroup), requests are
framed with the broker's own codec (`kgroups.broker.wire`), and any Kafka-compatible broker
will do.

    generator = await LoadGenerator.connect("127.0.0.1", 9092, MemberSettings("g", ("t",)))
    await generator.start_members(10_000)
    await generator.wait_stable(timeout_s=600)
    generator.tally.heartbeats, generator.tally.errors_by_code()

bench/members_load.py runs 10,000 of them against `kgroups serve` and Apache Kafka.
"""

from kgroups.loadgen.bootstrap import BootstrapError, GroupHome
from kgroups.loadgen.connection import BrokerConnection, ConnectionLost
from kgroups.loadgen.driver import LoadError, LoadGenerator
from kgroups.loadgen.tally import Tally

__all__ = [
    "BootstrapError",
    "BrokerConnection",
    "ConnectionLost",
    "GroupHome",
    "LoadError",
    "LoadGenerator",
    "Tally",
]
