"""The coordinator's requests and responses: already-decoded Kafka group APIs, one pair per API.

These mirror the Kafka messages' fields (snake_case) but only those the coordinator acts on; the
broker translates wire messages to and from them. Every request carries an opaque `request_id`
chosen by the caller, because JoinGroup and SyncGroup answers can come much later (a `Reply`
names the request it answers). `version` is the request's API version where behaviour depends on
it (MEMBER_ID_REQUIRED from JoinGroup v4, SkipAssignment from v9, ...).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import field

from kgroups.coordinator.rebalance_cause import RebalanceNote
from kgroups.errors import ErrorCode
from kgroups.immutable import value_class

RequestId = Hashable
NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""
# The longest string Kafka's protocol and records carry: an int16 length, in bytes of UTF-8.
MAX_STRING_BYTES = 32767


@value_class
class JoinGroupRequest:
    """`rebalance_timeout_ms` of -1 (JoinGroup v0 has none) means "use the session timeout"."""

    request_id: RequestId
    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 9
    reason: str | None = None  # v8+: why the client (re)joins, for the rebalance's log line


@value_class
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@value_class
class JoinGroupResponse:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinGroupMember, ...] = ()


@value_class
class SyncGroupRequest:
    """`protocol_type`/`protocol_name` are None before v5 (no consistency check then)."""

    request_id: RequestId
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    version: int = 5


@value_class
class SyncGroupResponse:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@value_class
class HeartbeatRequest:
    request_id: RequestId
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@value_class
class HeartbeatResponse:
    error: ErrorCode


@value_class
class MemberIdentity:
    """A member named in LeaveGroup: by member id, or by instance id with an empty member id."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None  # v5+: why it leaves, for the rebalance's log line


@value_class
class LeaveGroupRequest:
    """Before v3 a LeaveGroup names exactly one member and answers with one error."""

    request_id: RequestId
    group_id: str
    members: tuple[MemberIdentity, ...]
    version: int = 3


@value_class
class MemberLeaveResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@value_class
class LeaveGroupResponse:
    error: ErrorCode
    members: tuple[MemberLeaveResult, ...] = ()


@value_class
class OffsetCommitPartition:
    """`commit_timestamp` is set only by OffsetCommit v1; -1 means "the coordinator's now"."""

    partition: int
    offset: int
    metadata: str | None = ""
    leader_epoch: int = -1
    commit_timestamp: int = -1


@value_class
class OffsetCommitTopic:
    name: str
    partitions: tuple[OffsetCommitPartition, ...]


@value_class
class OffsetCommitRequest:
    """`retention_time_ms` comes from v2-v4; -1 means the broker's offsets.retention.minutes."""

    request_id: RequestId
    group_id: str
    topics: tuple[OffsetCommitTopic, ...]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    retention_time_ms: int = -1
    version: int = 9


@value_class
class PartitionError:
    partition: int
    error: ErrorCode


@value_class
class TopicPartitionErrors:
    name: str
    partitions: tuple[PartitionError, ...]


@value_class
class OffsetCommitResponse:
    topics: tuple[TopicPartitionErrors, ...]


@value_class
class TxnOffsetCommitRequest:
    """TxnOffsetCommit (API 28): offsets a transactional producer commits for `group_id`, held
    pending until its transaction's marker. v0-v2 carry no member fields (the defaults: no
    generation, no member, no instance), so they are never fenced by the group (KIP-447 came
    with v3)."""

    request_id: RequestId
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: tuple[OffsetCommitTopic, ...]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None


@value_class
class TxnOffsetCommitResponse:
    topics: tuple[TopicPartitionErrors, ...]


@value_class
class CompleteTransactionRequest:
    """The transaction coordinator's marker for `producer_id` in one __consumer_offsets
    partition: written to the log, then the producer's pending offsets there are committed
    (`commits`) or dropped."""

    request_id: RequestId
    offsets_partition: int
    producer_id: int
    producer_epoch: int
    commits: bool
    coordinator_epoch: int


@value_class
class CompleteTransactionResponse:
    error: ErrorCode


@value_class
class OffsetFetchGroup:
    """`topics` None asks for every committed partition of the group (OffsetFetch v2+);
    `member_id`/`member_epoch` (v9+) are checked for consumer-protocol groups."""

    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    member_id: str | None = None
    member_epoch: int = -1


@value_class
class OffsetFetchRequest:
    """One or many groups (v8+ batches them); older versions send exactly one.
    `require_stable` (v7+): a partition with a pending transactional offset answers
    UNSTABLE_OFFSET_COMMIT instead of its committed offset."""

    request_id: RequestId
    groups: tuple[OffsetFetchGroup, ...]
    require_stable: bool = False


@value_class
class FetchedOffset:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


@value_class
class FetchedTopic:
    name: str
    partitions: tuple[FetchedOffset, ...]


@value_class
class FetchedGroup:
    group_id: str
    error: ErrorCode
    topics: tuple[FetchedTopic, ...] = ()


@value_class
class OffsetFetchResponse:
    groups: tuple[FetchedGroup, ...]


@value_class
class DescribeGroupsRequest:
    """From v6 (Kafka 4.0) an unknown group answers GROUP_ID_NOT_FOUND instead of "Dead"."""

    request_id: RequestId
    group_ids: tuple[str, ...]
    version: int = 5


@value_class
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@value_class
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str = "Dead"
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    last_rebalance: RebalanceNote | None = None  # kgroups' own: why the last rebalance began
    error_message: str | None = None  # v6+: why the group is not found


@value_class
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@value_class
class ListGroupsRequest:
    """`states_filter` (v4+) keeps groups whose state matches any entry, case-insensitively."""

    request_id: RequestId
    states_filter: tuple[str, ...] = ()


@value_class
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # "consumer" for KIP-848 groups


@value_class
class ListGroupsResponse:
    error: ErrorCode
    groups: tuple[ListedGroup, ...] = ()


@value_class
class DeleteGroupsRequest:
    request_id: RequestId
    group_ids: tuple[str, ...]


@value_class
class DeleteGroupsResponse:
    results: tuple[tuple[str, ErrorCode], ...]


@value_class
class OffsetDeleteRequest:
    request_id: RequestId
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


@value_class
class OffsetDeleteResponse:
    error: ErrorCode
    topics: tuple[TopicPartitionErrors, ...] = field(default=())


Response = (
    JoinGroupResponse
    | TxnOffsetCommitResponse
    | CompleteTransactionResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | DescribeGroupsResponse
    | ListGroupsResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
)
