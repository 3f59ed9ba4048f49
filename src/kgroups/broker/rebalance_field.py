"""The last rebalance's cause on the wire: a tagged field kgroups adds to DescribeGroups v5+.

`kgroups groups describe` is a client of the public APIs, and no Kafka API says why a group
rebalanced. Flexible versions exist for this: a tagged field a client does not know is skipped
(Kafka's clients and librdkafka do). kgroups adds one to each described group, tag
`REBALANCE_TAG`, holding JSON: {"cause", "detail", "started_ms", "old_generation"}. Some client
libraries (kio among them) refuse unknown tags instead, so the field is sent only to clients
whose client id starts with "kgroups" (its own tools).
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.wire import response_type, sibling
from kgroups.coordinator.rebalance_cause import RebalanceCause, RebalanceNote

REBALANCE_TAG = 10_000  # far above the tags Kafka allocates (from 0 up)
FIRST_VERSION = 5  # the first flexible DescribeGroups
CLIENT_ID_PREFIX = "kgroups"
_FIELD = "kgroups_last_rebalance"


def wants_rebalance_field(client_id: str | None, version: int) -> bool:
    return version >= FIRST_VERSION and (client_id or "").startswith(CLIENT_ID_PREFIX)


@cache
def extended_response(version: int) -> tuple[type[Any], type[Any]]:
    """(response class, described-group class) of DescribeGroups `version` with the field."""
    base_response = response_type(ApiKey.DESCRIBE_GROUPS, version)
    base_group = sibling(base_response, "DescribedGroup")
    group = dataclasses.make_dataclass(
        "DescribedGroup",
        [(_FIELD, str | None,
          dataclasses.field(metadata={"kafka_type": "string", "tag": REBALANCE_TAG},
                            default=None))],
        bases=(base_group,), frozen=True, slots=True, kw_only=True)
    response = dataclasses.make_dataclass(
        "DescribeGroupsResponse", [("groups", tuple[group, ...])],  # type: ignore[valid-type]
        bases=(base_response,), frozen=True, slots=True, kw_only=True)
    group.__module__ = response.__module__ = base_response.__module__
    return response, group


def with_rebalance(group: Any, note: RebalanceNote | None, version: int) -> Any:
    """A described group (kio class) as the extended class, carrying `note`."""
    _, extended = extended_response(version)
    values = {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}
    return extended(**values, **{_FIELD: None if note is None else json.dumps({
        "cause": note.cause.value, "detail": note.detail, "started_ms": note.started_ms,
        "old_generation": note.old_generation})})


def rebalance_of(group: Any) -> RebalanceNote | None:
    """The note a kgroups broker sent in a described group read with the extended class."""
    raw = getattr(group, _FIELD, None)
    if raw is None:
        return None
    data = json.loads(raw)
    return RebalanceNote(RebalanceCause(data["cause"]), data["detail"], int(data["started_ms"]),
                         int(data["old_generation"]))
