"""A streams group's topology against the topics that exist: what Kafka 4.3.1's coordinator
decides before it assigns tasks (its InternalTopicManager).

The members send the topology (subtopologies with their source, repartition and changelog
topics); the coordinator checks it against the topics: source topics must exist
(MISSING_SOURCE_TOPICS), repartition topics get their partition counts (given, or those of the
subtopologies writing to them), copartitioned topics must agree (INCORRECTLY_PARTITIONED_TOPICS),
and internal topics (repartition and changelog) that do not exist yet are handed to the broker to
create (MISSING_INTERNAL_TOPICS) while existing ones must have the expected partitions. Only a
topology with no such status is ready: its subtopologies get tasks (as many as the most
partitions of their source topics). The messages are Kafka's, names in Kafka's order (sorted for
missing source topics, a Java hash set's iteration order for missing internal topics).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kgroups.coordinator.consumer_group import TopicInfo as ExistingTopic
from kgroups.coordinator.consumer_group import metadata_hash
from kgroups.coordinator.group import java_hash_map_order
from kgroups.coordinator.streams_messages import StreamsStatus
from kgroups.records.streams_group import StreamsGroupTopologyValue, Subtopology, TopicInfo


@dataclass(frozen=True, slots=True)
class ConfiguredSubtopology:
    """A subtopology with its partition counts decided: `num_tasks` tasks."""

    subtopology_id: str
    num_tasks: int
    source_topics: tuple[str, ...]
    repartition_source_topics: tuple[TopicInfo, ...]
    state_changelog_topics: tuple[TopicInfo, ...]
    repartition_sink_topics: tuple[str, ...]

    @property
    def stateful(self) -> bool:
        return bool(self.state_changelog_topics)

    def input_topics(self) -> tuple[str, ...]:
        """The topics whose partitions a task reads (source, then repartition source)."""
        return (*self.source_topics, *(t.name for t in self.repartition_source_topics))


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    """The outcome of checking a topology epoch against the topics. `subtopologies` (sorted by
    id, as Kafka's sorted map) is None when partition counts could not be decided; `status`
    (code, message) is None when the topology is ready for assignment."""

    epoch: int
    subtopologies: dict[str, ConfiguredSubtopology] | None
    internal_topics_to_create: tuple[TopicInfo, ...] = ()
    status: tuple[int, str] | None = None
    metadata_hash: int = field(default=0, compare=False)

    @property
    def ready(self) -> bool:
        return self.status is None and self.subtopologies is not None


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.status = (code, message)


def topology_topics(topology: StreamsGroupTopologyValue) -> tuple[str, ...]:
    """Every topic the topology names (what its metadata hash covers)."""
    names: dict[str, None] = {}
    for sub in topology.subtopologies:
        names.update(dict.fromkeys(sub.source_topics))
        names.update(dict.fromkeys(t.name for t in sub.repartition_source_topics))
        names.update(dict.fromkeys(t.name for t in sub.state_changelog_topics))
    return tuple(names)


def topology_hash(topology: StreamsGroupTopologyValue | None,
                  topics: Mapping[str, ExistingTopic]) -> int:
    """The group's metadata hash: moves when a topic the topology names is created, deleted,
    recreated or grown (kgroups' own digest, as for consumer groups)."""
    return 0 if topology is None else metadata_hash(topology_topics(topology), topics)


def configure(topology: StreamsGroupTopologyValue,
              topics: Mapping[str, ExistingTopic]) -> ConfiguredTopology:
    """Check `topology` against `topics` (see the module docstring)."""
    counts = {name: info.partitions for name, info in topics.items()}
    digest = topology_hash(topology, topics)
    try:
        _check_source_topics(topology, counts)
        decided = _repartition_counts(topology, counts)
        _enforce_copartitioning(topology, counts, decided)
        subtopologies = _configured(topology, counts, decided)
        to_create = _missing_internal_topics(subtopologies.values(), counts)
    except _Refused as refused:
        return ConfiguredTopology(topology.epoch, None, (), refused.status, digest)
    status = None
    if to_create:
        names = java_hash_map_order(list(dict.fromkeys(t.name for t in to_create)))
        status = (StreamsStatus.MISSING_INTERNAL_TOPICS,
                  f"Internal topics are missing: {', '.join(names)}")
    return ConfiguredTopology(topology.epoch, subtopologies, to_create, status, digest)


def _repartition_names(topology: StreamsGroupTopologyValue) -> set[str]:
    return {t.name for sub in topology.subtopologies for t in sub.repartition_source_topics}


def _check_source_topics(topology: StreamsGroupTopologyValue, counts: Mapping[str, int]) -> None:
    internal = _repartition_names(topology)
    missing = [name for sub in topology.subtopologies for name in sub.source_topics
               if name not in counts and name not in internal]
    if missing:
        names = sorted(set(missing))
        raise _Refused(StreamsStatus.MISSING_SOURCE_TOPICS,
                       f"Source topics {', '.join(names)} are missing.")


def _source_partitions(sub: Subtopology, counts: Mapping[str, int],
                       decided: Mapping[str, int]) -> int | None:
    """The most partitions of the subtopology's inputs known so far (None: none known)."""
    known = [counts[name] for name in sub.source_topics if name in counts]
    known += [decided[t.name] for t in sub.repartition_source_topics if t.name in decided]
    return max(known) if known else None


def _repartition_counts(topology: StreamsGroupTopologyValue,
                        counts: Mapping[str, int]) -> dict[str, int]:
    """Each repartition topic's partitions: the count the topology gives, else the most tasks of
    the subtopologies that write to it (resolved until nothing changes, as Kafka iterates)."""
    decided = {t.name: t.partitions for sub in topology.subtopologies
               for t in sub.repartition_source_topics if t.partitions > 0}
    open_names = [t.name for sub in topology.subtopologies
                  for t in sub.repartition_source_topics if t.name not in decided]
    sinks = {name for sub in topology.subtopologies for name in sub.repartition_sink_topics}
    if any(name not in sinks for name in open_names):
        raise _Refused(StreamsStatus.MISSING_SOURCE_TOPICS,
                       "Failed to compute number of partitions for all repartition topics, "
                       "because a repartition source topic is never used as a sink topic.")
    while open_names:
        progress = False
        for name in list(open_names):
            writers = [_source_partitions(sub, counts, decided) for sub in topology.subtopologies
                       if name in sub.repartition_sink_topics]
            known = [n for n in writers if n is not None]
            if known:
                decided[name] = max(known)
                open_names.remove(name)
                progress = True
        if not progress:
            raise _Refused(StreamsStatus.MISSING_SOURCE_TOPICS,
                           "Failed to compute number of partitions for all repartition topics. "
                           "There may be loops in the topology that cannot be resolved.")
    return decided


def _enforce_copartitioning(topology: StreamsGroupTopologyValue, counts: Mapping[str, int],
                            decided: dict[str, int]) -> None:
    for sub in topology.subtopologies:
        for group in sub.copartition_groups:
            sources = [sub.source_topics[i] for i in group.source_topics]
            repartition = [sub.repartition_source_topics[i]
                           for i in group.repartition_source_topics]
            source_counts = {name: counts[name] for name in sources if name in counts}
            if len(set(source_counts.values())) > 1:
                listed = ", ".join(f"{name}={n}" for name, n in sorted(source_counts.items()))
                raise _Refused(StreamsStatus.INCORRECTLY_PARTITIONED_TOPICS,
                               "Following topics do not have the same number of partitions: "
                               f"[{{{listed}}}]")
            if source_counts:
                wanted = next(iter(source_counts.values()))
            elif repartition:
                wanted = max(decided[t.name] for t in repartition)
            else:
                continue
            for info in repartition:
                if info.partitions > 0 and info.partitions != wanted:
                    raise _Refused(StreamsStatus.INCORRECTLY_PARTITIONED_TOPICS,
                                   f"Number of partitions [{info.partitions}] of repartition "
                                   f"topic [{info.name}] doesn't match number of partitions "
                                   f"[{wanted}] of the source topic.")
                decided[info.name] = wanted


def _configured(topology: StreamsGroupTopologyValue, counts: Mapping[str, int],
                decided: Mapping[str, int]) -> dict[str, ConfiguredSubtopology]:
    result = {}
    for sub in sorted(topology.subtopologies, key=lambda s: s.subtopology_id):
        tasks = _source_partitions(sub, counts, decided) or 0
        result[sub.subtopology_id] = ConfiguredSubtopology(
            sub.subtopology_id, tasks, sub.source_topics,
            tuple(TopicInfo(t.name, decided[t.name], t.replication_factor, t.topic_configs)
                  for t in sub.repartition_source_topics),
            tuple(TopicInfo(t.name, tasks, t.replication_factor, t.topic_configs)
                  for t in sub.state_changelog_topics),
            sub.repartition_sink_topics)
    return result


def _missing_internal_topics(subtopologies: Iterable[ConfiguredSubtopology],
                             counts: Mapping[str, int]) -> tuple[TopicInfo, ...]:
    """Internal topics to create; an existing one with other partitions is refused."""
    wanted: dict[str, TopicInfo] = {}
    for sub in subtopologies:
        for info in (*sub.repartition_source_topics, *sub.state_changelog_topics):
            wanted.setdefault(info.name, info)
    for name, info in wanted.items():
        found = counts.get(name)
        if found is not None and found != info.partitions:
            raise _Refused(StreamsStatus.INCORRECTLY_PARTITIONED_TOPICS,
                           f"Existing topic {name} has different number of partitions: "
                           f"expected {info.partitions}, found {found}")
    return tuple(info for name, info in wanted.items() if name not in counts)
