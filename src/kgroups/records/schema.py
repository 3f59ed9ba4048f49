"""The __consumer_offsets record model, as plain data.

Every package that touches group state speaks in these types: the coordinator emits them, the log
stores their encoded bytes, the pipeline decodes them back. Field names follow Kafka's schemas
(OffsetCommitKey, OffsetCommitValue, GroupMetadataKey, GroupMetadataValue, ConsumerProtocol
Subscription/Assignment) in snake_case; the byte codecs live in `kgroups.records.codec` and
`kgroups.records.consumer_protocol`.
"""

from __future__ import annotations

from dataclasses import field

from kgroups.immutable import value_class
from kgroups.records.consumer_group import ConsumerGroupKey, ConsumerGroupValue
from kgroups.records.share_group import ShareGroupKey, ShareGroupValue
from kgroups.records.streams_group import StreamsGroupKey, StreamsGroupValue


@value_class
class OffsetCommitKey:
    """Key of a committed offset: key types 0 and 1 share this layout (Kafka writes 1)."""

    group: str
    topic: str
    partition: int
    version: int = 1


@value_class
class GroupMetadataKey:
    """Key of a group's metadata record (key type 2)."""

    group: str
    version: int = 2


@value_class
class UnknownKey:
    """A key of a type kgroups does not interpret (9 to 15 and 17 up: share and streams
    groups): kept opaque so logs read."""

    version: int
    data: bytes


RecordKey = (OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | StreamsGroupKey
             | ShareGroupKey | UnknownKey)


@value_class
class OffsetCommitValue:
    """A committed offset. `expire_timestamp` is set only by old OffsetCommit versions (v1).
    `topic_id` (16 bytes) is v4's tagged field 0, which Kafka 4.x writes beside every commit;
    it is kept so that a Kafka log reads back with everything Kafka put in it."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int | None = None
    topic_id: bytes | None = None


@value_class
class MemberMetadata:
    """One member as stored in a GroupMetadataValue: its join metadata and its assignment."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@value_class
class GroupMetadataValue:
    """A group's generation: the selected protocol, its leader and every member."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...] = ()


RecordValue = (OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue | StreamsGroupValue
               | ShareGroupValue)


@value_class
class TopicPartitions:
    """A topic and some of its partitions, as ConsumerProtocol lists them."""

    topic: str
    partitions: tuple[int, ...]


@value_class
class ConsumerSubscription:
    """ConsumerProtocol subscription (the member metadata of protocol type "consumer")."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 3


@value_class
class ConsumerAssignment:
    """ConsumerProtocol assignment (what SyncGroup hands each member of a "consumer" group)."""

    assigned_partitions: tuple[TopicPartitions, ...] = ()
    user_data: bytes | None = None
    version: int = 3


@value_class
class OffsetsRecord:
    """One __consumer_offsets record: a key and its value, `None` for a tombstone."""

    key: RecordKey
    value: RecordValue | None = field(default=None)
