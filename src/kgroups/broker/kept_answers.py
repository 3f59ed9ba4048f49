"""Answers kept encoded by a key that fixes every byte of them, for the requests clients repeat.

A consumer commits the same partitions again and again, and every answer says the same thing
(each partition NONE): building its kio objects and encoding them again was about a tenth of an
OffsetCommit's broker CPU (bench/request_path.py). A Metadata refresh asks the same topics again
(`metadata_answer.TopicEntryCache` keeps its whole answers here, dropped at every topic change).
An answer is encoded once and served as those bytes behind a fresh header. The store holds at
most `KEPT_BYTES` of answers (or a single larger one), and starts again empty when full: a client
asking many different things (topic names of any length: a key is about as large as its answer)
costs rebuilds now and then, never unbounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from kgroups.broker.wire import EncodedAnswer

KEPT_BYTES = 4 * 1024 * 1024
# OffsetCommit answers are kept only about this many partitions at most: their key is hashed
# at every commit.
KEPT_PARTITIONS = 64


class KeptAnswers:
    """Encoded answers by key, at most `limit` bytes of them."""

    def __init__(self, limit: int = KEPT_BYTES) -> None:
        self._limit = limit
        self._answers: dict[Hashable, EncodedAnswer] = {}
        self._bytes = 0

    def get(self, key: Hashable) -> EncodedAnswer | None:
        return self._answers.get(key)

    def keep(self, key: Hashable, encoded: EncodedAnswer) -> EncodedAnswer:
        """Keep `encoded` for `key` (emptying the store first if it would go past its limit)."""
        if self._bytes + len(encoded.body) > self._limit:
            self.clear()
        self._answers[key] = encoded
        self._bytes += len(encoded.body)
        return encoded

    def answer(self, key: Hashable, build: Callable[[], Any]) -> EncodedAnswer:
        """The answer kept for `key`, else `build()` (a kio response) encoded and kept."""
        kept = self._answers.get(key)
        return kept if kept is not None else self.keep(key, EncodedAnswer.of(build()))

    def clear(self) -> None:
        self._answers.clear()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        """The bytes of the answers kept."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._answers)
