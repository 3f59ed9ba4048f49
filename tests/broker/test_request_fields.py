"""The typed readers of version-dependent request fields (broker/apis/request_fields.py) against
every version kio ships: a version whose schema has the field gets the request's value, one
without it gets what Kafka assumes. The type checker proves the field exists where it is read;
this proves no version that has it is answered with the default instead."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest

from kgroups.broker.apis import request_fields as fields


def _versions(api: str, class_name: str) -> list[type[Any]]:
    """Every version's class of that name in kio.schema.<api>."""
    package = importlib.import_module(f"kio.schema.{api}")
    classes = []
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("v"):
            request = importlib.import_module(f"kio.schema.{api}.{module.name}.request")
            if hasattr(request, class_name):  # a nested class exists from some version on
                classes.append(getattr(request, class_name))
    return classes


def _with(cls: type[Any], values: dict[str, Any]) -> Any:
    """An instance carrying only these fields (those its version has): enough for one reader."""
    instance = object.__new__(cls)
    for name in {f.name for f in dataclasses.fields(cls)} & values.keys():
        object.__setattr__(instance, name, values[name])
    return instance


MS = datetime.timedelta(milliseconds=1234)
# reader, kio api, class, field, its value (or the fields' values), what the reader gives for
# it, the default, served
# versions (kio ships some kgroups does not serve: OffsetCommit/OffsetFetch v10, by topic id).
CASES: list[tuple[Callable[[Any], Any], str, str, str, Any, Any, Any, range]] = [
    (fields.join_rebalance_timeout_ms, "join_group", "JoinGroupRequest", "rebalance_timeout",
     MS, 1234, -1, range(0, 10)),
    (fields.join_group_instance_id, "join_group", "JoinGroupRequest", "group_instance_id",
     "static-1", "static-1", None, range(0, 10)),
    (fields.join_reason, "join_group", "JoinGroupRequest", "reason", "why", "why", None,
     range(0, 10)),
    (fields.sync_group_instance_id, "sync_group", "SyncGroupRequest", "group_instance_id",
     "static-1", "static-1", None, range(0, 6)),
    (fields.sync_protocol, "sync_group", "SyncGroupRequest", "protocol_type",
     {"protocol_type": "consumer", "protocol_name": "range"}, ("consumer", "range"),
     (None, None), range(0, 6)),
    (fields.heartbeat_group_instance_id, "heartbeat", "HeartbeatRequest", "group_instance_id",
     "static-1", "static-1", None, range(0, 5)),
    (fields.leave_reason, "leave_group", "MemberIdentity", "reason", "why", "why", None,
     range(3, 6)),
    (fields.commit_group_instance_id, "offset_commit", "OffsetCommitRequest",
     "group_instance_id", "static-1", "static-1", None, range(2, 10)),
    (fields.commit_retention_ms, "offset_commit", "OffsetCommitRequest", "retention_time", MS,
     1234, -1, range(2, 10)),
    (fields.commit_leader_epoch, "offset_commit", "OffsetCommitRequestPartition",
     "committed_leader_epoch", 7, 7, -1, range(2, 10)),
    (fields.fetch_member, "offset_fetch", "OffsetFetchRequestGroup", "member_id",
     {"member_id": "m-1", "member_epoch": 5}, ("m-1", 5), (None, -1), range(8, 10)),
    (fields.describe_include_operations, "describe_groups", "DescribeGroupsRequest",
     "include_authorized_operations", True, True, False, range(0, 7)),
    (fields.list_states_filter, "list_groups", "ListGroupsRequest", "states_filter",
     ("Stable",), ("Stable",), (), range(0, 6)),
    (fields.list_types_filter, "list_groups", "ListGroupsRequest", "types_filter",
     ("consumer",), ("consumer",), (), range(0, 6)),
    (fields.heartbeat_topic_regex, "consumer_group_heartbeat", "ConsumerGroupHeartbeatRequest",
     "subscribed_topic_regex", "t.*", "t.*", None, range(0, 2)),
    (fields.coordinator_key_type, "find_coordinator", "FindCoordinatorRequest", "key_type", 1,
     1, 0, range(0, 7)),
    (fields.deleted_topic_names, "delete_topics", "DeleteTopicsRequest", "topic_names",
     ("a",), ("a",), None, range(1, 7)),
]


@pytest.mark.parametrize(("reader", "api", "class_name", "name", "value", "read", "default",
                          "served"), CASES, ids=[case[3] for case in CASES])
def test_reader_answers_the_field_in_every_version_that_has_it(
        reader: Callable[[Any], Any], api: str, class_name: str, name: str, value: Any,
        read: Any, default: Any, served: range) -> None:
    classes = [cls for cls in _versions(api, class_name)
               if int(cls.__module__.split(".")[-2].removeprefix("v")) in served]
    assert len(classes) == len(served)
    with_field = 0
    for cls in classes:
        has = name in {f.name for f in dataclasses.fields(cls)}
        with_field += has
        values = value if isinstance(value, dict) else {name: value}
        assert reader(_with(cls, values)) == (read if has else default), cls.__module__
    assert with_field > 0  # the field exists in some served version
