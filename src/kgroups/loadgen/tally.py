"""What the members' traffic came to: requests sent and answered per API, answers by error
code, and the members that stopped (a fatal error, a lost connection) with why."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kgroups.errors import ErrorCode

# The APIs whose error-free answers count as heartbeats answered.
HEARTBEAT_APIS = frozenset({"Heartbeat", "ConsumerGroupHeartbeat"})


@dataclass(slots=True)
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (API, error name)
    heartbeats: int = 0  # heartbeats answered without an error
    failures: dict[str, str] = field(default_factory=dict)  # member name -> why it stopped

    def answer(self, api: str, error: ErrorCode) -> None:
        self.answered[api] += 1
        if error is not ErrorCode.NONE:
            self.errors[api, error.name] += 1
        elif api in HEARTBEAT_APIS:
            self.heartbeats += 1

    def errors_by_code(self) -> dict[str, int]:
        """Error answers by error name, over every API."""
        by_code: Counter[str] = Counter()
        for (_, name), count in self.errors.items():
            by_code[name] += count
        return dict(by_code.most_common())
