"""Answers kept encoded by what they say, for the requests a client repeats.

A consumer commits the same partitions again and again, and every answer says the same thing
(each partition NONE): building its kio objects and encoding them again was about a tenth of an
OffsetCommit's broker CPU (bench/request_path.py). An answer whose bytes follow from its key
alone (the version and every (topic, partition, error) in request order; the throttle time is
always 0) is encoded once and served as those bytes behind a fresh header, whatever else
changes, so nothing can leave one stale. The broker keeps none under an authorizer: its rule
reads the handler's answer (the topics it allowed) and adds the denied ones to a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from kgroups.broker.wire import EncodedAnswer

# Answers kept at most; past it the store starts again empty (a client asking many different
# partition sets costs a rebuild now and then, never unbounded memory).
KEPT_ANSWERS = 4096
# Only answers about this many partitions at most are kept: a key is as large as its answer.
KEPT_PARTITIONS = 64


class KeptAnswers:
    """Encoded answers by a key that fixes every byte of them."""

    def __init__(self, limit: int = KEPT_ANSWERS) -> None:
        self._limit = limit
        self._answers: dict[Hashable, EncodedAnswer] = {}

    def answer(self, key: Hashable, build: Callable[[], Any]) -> EncodedAnswer:
        """The answer kept for `key`, else `build()` (a kio response) encoded and kept."""
        kept = self._answers.get(key)
        if kept is None:
            if len(self._answers) >= self._limit:
                self._answers.clear()
            kept = self._answers[key] = EncodedAnswer.of(build())
        return kept
