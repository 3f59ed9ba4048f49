"""Acknowledgement batches as ShareFetch and ShareAcknowledge carry them, and the request-level
checks Kafka 4.3.1 answers INVALID_REQUEST to before it looks at any record.

A batch names offsets first..last and either one type for all of them or one type per offset;
RENEW (extend the acquisition lock, keep the record) is accepted only when the request says
it carries renewals (`is_renew_ack`, v2).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum


class AckType(IntEnum):
    """Kafka's acknowledge types by their wire numbers."""

    GAP = 0  # the offset holds no record (compacted away, a control record): archived
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True, slots=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    def offsets(self) -> Iterator[tuple[int, AckType]]:
        """Each offset with its type (one type given: all of them)."""
        for index, offset in enumerate(range(self.first_offset, self.last_offset + 1)):
            yield offset, AckType(self.types[0] if len(self.types) == 1 else self.types[index])


def is_valid_request(batches: Sequence[AckBatch], renew_allowed: bool) -> bool:
    """Kafka's shape checks: first <= last, one type or one per offset, every type known, and
    RENEW only in a request that declared renewals. Overlaps are not checked here: Kafka
    answers them per record (the second acknowledgement finds the record no longer acquired)."""
    for batch in batches:
        if batch.first_offset < 0 or batch.last_offset < batch.first_offset:
            return False
        size = batch.last_offset - batch.first_offset + 1
        if len(batch.types) not in (1, size):
            return False
        highest = AckType.RENEW if renew_allowed else AckType.REJECT
        if any(not 0 <= kind <= highest for kind in batch.types):
            return False
    return True
