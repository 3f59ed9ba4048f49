"""Running totals over a broker's share partitions: what an operator watches of a queue.

The share partitions add to one `ShareCounts` the broker owns (it outlives a partition dropped
and loaded again); the metrics endpoint reads it at each scrape. Deliveries count every
acquisition, redeliveries those of a record delivered before; acknowledgements count by type;
archived-at-limit counts the records a release or a lock timeout archived because they had been
delivered `share.delivery.count.limit` times (the "poison message" figure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class ShareCounts:
    delivered: int = 0
    redelivered: int = 0
    # ACCEPT, RELEASE, REJECT, RENEW, GAP (the acknowledgement type's name, lower case).
    acknowledged: Counter[str] = field(default_factory=Counter)
    archived_at_limit: int = 0
    lock_timeouts: int = 0
