"""kgroups.member: the client side of a consumer group as sans-IO state machines.

Like the coordinator, a member never touches sockets or clocks: its driver passes the time in,
takes the requests it wants sent (`take_requests`), hands it the answers (`on_response`) and
calls `advance(now)` at `next_deadline(now)`. `owned` is what the member consumes right now.

    ClassicMember(key, MemberSettings(...), ClusterMetadata(...), now)   # eager / cooperative
    ConsumerMember(key, MemberSettings(protocol=Protocol.CONSUMER, ...), member_id,
                   topic_ids, now)                                      # KIP-848

The simulator (kgroups.simulate) drives them against the real coordinator; docs/simulate.md
describes which client behaviour each follows.
"""

from kgroups.member.classic import ClassicMember, ClassicState
from kgroups.member.consumer import ConsumerMember, ConsumerState
from kgroups.member.outbox import CommitLedger, MemberRequest
from kgroups.member.poll_loop import PollLoop
from kgroups.member.settings import ClientFlavour, MemberSettings, Protocol, TopicPartition

__all__ = [
    "ClassicMember",
    "ClassicState",
    "ClientFlavour",
    "CommitLedger",
    "ConsumerMember",
    "ConsumerState",
    "MemberRequest",
    "MemberSettings",
    "PollLoop",
    "Protocol",
    "TopicPartition",
]
