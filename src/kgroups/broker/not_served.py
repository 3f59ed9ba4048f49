"""What a client asked for that kgroups does not serve yet, said once per client in the log.

A client asking for a feature kgroups lacks gets the answer Kafka gives when that feature is
unavailable (FindCoordinator for a transactional id: COORDINATOR_NOT_AVAILABLE), which clients
retry without end: a Java producer sends about 290 FindCoordinator requests in 30 s and Kafka
Streams with exactly_once_v2 stays in REBALANCING, while the broker used to say nothing. Each
client (its host and client id) gets one WARNING line per feature. Memory stays bounded: past
`capacity` clients the longest quiet one is forgotten, and is logged again if it asks again.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from kgroups.broker.events import log_event

logger = logging.getLogger("kgroups.broker")

# Clients remembered (host, client id, feature); a few hundred bytes each.
CAPACITY = 4096


class NotServedLog:
    """The broker's record of which clients were told what it does not serve."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._logged: OrderedDict[tuple[str, str | None, str], None] = OrderedDict()

    def report(self, client_host: str, client_id: str | None, feature: str,
               request: str) -> None:
        """The client asked for `feature` with `request` (e.g. "FindCoordinator(transaction)"):
        logged unless this client was already told about this feature."""
        key = (client_host, client_id, feature)
        if key in self._logged:
            self._logged.move_to_end(key)
            return
        self._logged[key] = None
        if len(self._logged) > self._capacity:
            self._logged.popitem(last=False)
        log_event(logger, logging.WARNING, "not_served", feature=feature, request=request,
                  client_id=client_id, client_host=client_host,
                  note="kgroups does not serve this yet (README: not served yet); the client "
                       "gets Kafka's answer for an unavailable feature and may retry")
