"""A Metadata answer assembled from topic entries encoded once, not rebuilt for every request.

A client with a regex subscription (librdkafka, the Java consumer) asks for every topic before
it joins its group and at every refresh; on a broker with a thousand topics, building a kio
object per partition and encoding it again took ~20 ms of CPU per answer, several times Kafka's
time, on the one event loop every group shares (bench/metadata.py). What a topic's entry holds
(its name, id, partitions, leader and replicas) depends only on the topic and the Metadata
version, so each is encoded once and reused while the topic keeps its partition count and id.
The one principal-dependent field, topic_authorized_operations (v8+), is left out of the cached
bytes and written per answer, so the ACL rule (acl_enforcement) still narrows it and still
leaves out the topics a principal may not describe; the entries it adds (denied topics, errors)
stay kio objects and are encoded as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kgroups.broker.kept_answers import KeptAnswers
from kgroups.broker.wire import EncodedAnswer, SelfEncodingResponse, encode_entity
from kgroups.log.batch import uvarint

_INT32 = struct.Struct(">i")
# The first version with topic_authorized_operations, and with flexible (compact) encoding,
# whose structs end with a tagged-field section: empty here, one byte.
OPERATIONS_VERSION = 8
FLEXIBLE_VERSION = 9
_EMPTY_TAGGED_FIELDS = b"\x00"


@dataclass(frozen=True, slots=True)
class EncodedTopic:
    """One topic's entry of a Metadata answer before v8 (no authorized operations), encoded."""

    name: str
    encoded: bytes


@dataclass(frozen=True, slots=True)
class EncodedTopicWithOperations:
    """One topic's entry from v8, encoded but for its authorized operations: `head` is the
    entry up to that field, `tail` what follows it. `name` and `topic_authorized_operations`
    are what the ACL rule reads and replaces, as on a kio entry."""

    name: str
    topic_authorized_operations: int
    head: bytes
    tail: bytes


CachedTopic = EncodedTopic | EncodedTopicWithOperations
# The entry types of topics found without error (an error entry is a kio object).
ENCODED_TOPICS = (EncodedTopic, EncodedTopicWithOperations)


def encoded_topic(topic: Any, version: int) -> CachedTopic:
    """The kio topic entry `topic` of Metadata `version`, encoded (byte-identical to kio's
    writer) and, from v8, split around its operations field."""
    out: list[Any] = []
    encode_entity(topic, out)
    encoded = b"".join(out)
    if version < OPERATIONS_VERSION:
        return EncodedTopic(topic.name, encoded)
    tail = _EMPTY_TAGGED_FIELDS if version >= FLEXIBLE_VERSION else b""
    end = len(encoded) - len(tail)
    return EncodedTopicWithOperations(topic.name, int(topic.topic_authorized_operations),
                                      encoded[:end - _INT32.size], encoded[end:])


# What a cached answer is found by: the version, the topics asked (None: all), whether topic
# and cluster operations were asked for, and the address advertised on the request's listener.
AnswerKey = tuple[int, tuple[Any, ...] | None, bool, bool, tuple[str, int]]


class TopicEntryCache:
    """Encoded topic entries by Metadata version and topic name, per version the list of
    every topic's entry (what an all-topics request answers, before the ACL rule narrows it),
    and whole encoded answers by what was asked (`AnswerKey`).

    The catalog reports every topic created, grown or deleted (`topics_changed`); an entry is
    dropped when its topic's partition count changes or the topic goes, so one deleted and
    created again is encoded afresh with its new id, and the cache holds no more than the
    topics that exist. The lists and the whole answers are dropped at every change: an
    answer holds the ids and partitions of the topics it names, and an all-topics answer
    which topics exist. Whole answers are kept only where nothing else changes them
    (`whole_answers`: a broker on its own, whose leaders and brokers do not move, without an
    authorizer, whose ACLs narrow each answer per principal), and only answers whose every
    topic asked for was found (the handler decides)."""

    def __init__(self, whole_answers: bool = False) -> None:
        self.whole_answers = whole_answers
        self._counts: dict[str, int] = {}
        self._entries: dict[int, dict[str, CachedTopic]] = {}
        self._listed: dict[int, tuple[CachedTopic, ...]] = {}
        self._answers = KeptAnswers()

    def topics_changed(self, partition_counts: Mapping[str, int]) -> None:
        before, self._counts = self._counts, dict(partition_counts)
        changed = {name for name, count in before.items() if self._counts.get(name) != count}
        for entries in self._entries.values():
            for name in changed & entries.keys():
                del entries[name]
        self._listed.clear()
        self._answers.clear()

    def answer(self, key: AnswerKey) -> EncodedAnswer | None:
        return self._answers.get(key)

    def keep(self, key: AnswerKey, answer: MetadataAnswer) -> EncodedAnswer:
        """`answer` encoded, kept for the requests asking `key` until the topics change."""
        out: list[Any] = []
        answer.write_body(out)
        return self._answers.keep(key, EncodedAnswer(answer.response_class, b"".join(out)))

    def entry(self, version: int, name: str,
              encode: Callable[[str], CachedTopic]) -> CachedTopic:
        """The entry of an existing topic, encoded by `encode(name)` on its first request."""
        entries = self._entries.setdefault(version, {})
        found = entries.get(name)
        if found is None:
            found = entries[name] = encode(name)
        return found

    def every_topic(self, version: int,
                    encode: Callable[[str], CachedTopic]) -> tuple[CachedTopic, ...]:
        """Every topic's entry in name order, as the catalog last reported them."""
        listed = self._listed.get(version)
        if listed is None:
            listed = self._listed[version] = tuple(
                self.entry(version, name, encode) for name in self._counts)
        return listed

    def __len__(self) -> int:
        return sum(map(len, self._entries.values()))

    @property
    def answers(self) -> int:
        """How many whole answers are kept."""
        return len(self._answers)


@dataclass(frozen=True, slots=True)
class MetadataAnswer(SelfEncodingResponse):
    """A Metadata response whose topics may be EncodedTopic entries beside kio ones.

    `frame` is the kio response with no topics; `topics` and `cluster_authorized_operations`
    are kept apart, as fields the ACL rule can replace with dataclasses.replace as it would on
    the kio response (`cluster_authorized_operations` is None in versions without it)."""

    frame: Any
    topics: tuple[Any, ...]
    cluster_authorized_operations: int | None

    @property
    def response_class(self) -> type[Any]:
        return type(self.frame)

    def write_body(self, out: list[Any]) -> None:
        """The answer's bytes as kio would write the whole response: the frame's up to its
        empty topic array, the topics, then the fields after the array."""
        flexible = int(self.frame.__version__) >= FLEXIBLE_VERSION
        frame: list[Any] = []
        encode_entity(self.frame, frame)
        encoded = b"".join(frame)
        # After the topic array: cluster_authorized_operations (v8-v10), the tagged fields (v9+).
        with_cluster = self.cluster_authorized_operations is not None
        after = (_INT32.size if with_cluster else 0) + (1 if flexible else 0)
        empty_array = uvarint(1) if flexible else _INT32.pack(0)
        out.append(encoded[:len(encoded) - after - len(empty_array)])
        out.append(uvarint(len(self.topics) + 1) if flexible else _INT32.pack(len(self.topics)))
        append, pack = out.append, _INT32.pack
        for topic in self.topics:
            kind = type(topic)
            if kind is EncodedTopicWithOperations:
                append(topic.head)
                append(pack(topic.topic_authorized_operations))
                append(topic.tail)
            elif kind is EncodedTopic:
                append(topic.encoded)
            else:
                encode_entity(topic, out)
        if with_cluster:
            append(pack(self.cluster_authorized_operations))
        if flexible:
            append(_EMPTY_TAGGED_FIELDS)
