package kgroups.harness;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;

/**
 * Times Kafka's own server-side assignors (KIP-848: the group coordinator's `uniform` and
 * `range`) on a group where every member subscribes to every topic, as bench/consumer_protocol.py
 * times kgroups' on the same shape. Arguments: assignor, members, topics, partitions per topic,
 * repeat, and optionally "print". Two cases: a full assignment of a group with no current
 * assignment, and one member joining the group holding that assignment (the incremental case a
 * join triggers, the group holding its targets as the coordinator does after writing them).
 * Prints one JSON line: the best wall time of each case in milliseconds and, per
 * case, the fewest and most partitions a member got and how many partitions changed owner; with
 * "print", also both assignments as {member: {topic index: [partitions]}} (topic i has id
 * Uuid(1, i + 1)), to compare with another implementation's.
 */
public final class ServerAssignorBench {
    private ServerAssignorBench() { }

    public static void main(String[] args) {
        String name = args[0];
        int members = Integer.parseInt(args[1]);
        int topics = Integer.parseInt(args[2]);
        int partitionsPerTopic = Integer.parseInt(args[3]);
        int repeat = Integer.parseInt(args[4]);
        ConsumerGroupPartitionAssignor assignor =
            name.equals("range") ? new RangeAssignor() : new UniformAssignor();

        Map<Uuid, Integer> partitionCounts = new HashMap<>();
        for (int t = 0; t < topics; t++) {
            partitionCounts.put(new Uuid(1L, t + 1L), partitionsPerTopic);
        }
        Set<Uuid> allTopics = Collections.unmodifiableSet(new HashSet<>(partitionCounts.keySet()));
        SubscribedTopicDescriber describer = new SubscribedTopicDescriber() {
            @Override
            public int numPartitions(Uuid topicId) {
                return partitionCounts.getOrDefault(topicId, -1);
            }

            @Override
            public Set<String> racksForPartition(Uuid topicId, int partition) {
                return Set.of();
            }
        };

        List<String> ids = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            ids.add(String.format("member-%06d", m));
        }
        Map<String, Map<Uuid, Set<Integer>>> none = new HashMap<>();
        long[] fullBest = {Long.MAX_VALUE};
        GroupAssignment full = timed(assignor, ids, none, allTopics, describer, repeat, fullBest);

        Map<String, Map<Uuid, Set<Integer>>> held = new HashMap<>();
        // As the coordinator holds a target: rebuilt from the record it wrote (a HashMap of
        // HashSets over the record's lists), not the assignor's own maps.
        full.members().forEach((id, assignment) -> {
            Map<Uuid, Set<Integer>> replayed = new HashMap<>();
            assignment.partitions().forEach((topic, partitions) ->
                replayed.put(topic, new HashSet<>(new ArrayList<>(partitions))));
            held.put(id, replayed);
        });
        List<String> joined = new ArrayList<>(ids);
        joined.add("member-joining");
        long[] joinBest = {Long.MAX_VALUE};
        GroupAssignment join = timed(assignor, joined, held, allTopics, describer, repeat, joinBest);

        boolean print = args.length > 5 && args[5].equals("print");
        System.out.printf(
            "{\"assignor\": \"%s\", \"full_ms\": %.3f, \"join_ms\": %.3f, \"full\": %s, \"join\": %s%s}%n",
            name, fullBest[0] / 1e6, joinBest[0] / 1e6, summary(full, none), summary(join, held),
            print ? ", \"full_assignment\": " + listing(full) + ", \"join_assignment\": "
                + listing(join) : "");
    }

    private static String listing(GroupAssignment assignment) {
        StringBuilder out = new StringBuilder("{");
        assignment.members().entrySet().stream().sorted(Map.Entry.comparingByKey()).forEach(e -> {
            if (out.length() > 1) {
                out.append(", ");
            }
            out.append('"').append(e.getKey()).append("\": {");
            StringBuilder topics = new StringBuilder();
            e.getValue().partitions().entrySet().stream()
                .sorted(Map.Entry.comparingByKey()).forEach(t -> {
                    if (topics.length() > 0) {
                        topics.append(", ");
                    }
                    topics.append('"').append(t.getKey().getLeastSignificantBits() - 1)
                        .append("\": ").append(t.getValue().stream().sorted().toList());
                });
            out.append(topics).append('}');
        });
        return out.append('}').toString();
    }

    private static GroupAssignment timed(ConsumerGroupPartitionAssignor assignor, List<String> ids,
            Map<String, Map<Uuid, Set<Integer>>> current, Set<Uuid> topics,
            SubscribedTopicDescriber describer, int repeat, long[] best) {
        GroupAssignment result = null;
        for (int run = 0; run < repeat; run++) {
            Map<String, MemberSubscriptionAndAssignmentImpl> specs = new HashMap<>();
            Map<Uuid, Map<Integer, String>> owners = new HashMap<>();
            for (String id : ids) {
                Map<Uuid, Set<Integer>> owned = current.getOrDefault(id, Map.of());
                owned.forEach((topic, partitions) -> partitions.forEach(p ->
                    owners.computeIfAbsent(topic, t -> new HashMap<>()).put(p, id)));
                specs.put(id, new MemberSubscriptionAndAssignmentImpl(Optional.empty(),
                    Optional.empty(), topics, new Assignment(owned)));
            }
            GroupSpecImpl spec = new GroupSpecImpl(specs, SubscriptionType.HOMOGENEOUS, owners);
            long start = System.nanoTime();
            result = assignor.assign(spec, describer);
            best[0] = Math.min(best[0], System.nanoTime() - start);
        }
        return result;
    }

    private static String summary(GroupAssignment assignment,
                                  Map<String, Map<Uuid, Set<Integer>>> before) {
        int fewest = Integer.MAX_VALUE;
        int most = 0;
        int total = 0;
        int moved = 0;
        for (Map.Entry<String, MemberAssignment> entry : assignment.members().entrySet()) {
            int count = 0;
            Map<Uuid, Set<Integer>> had = before.getOrDefault(entry.getKey(), Map.of());
            for (Map.Entry<Uuid, Set<Integer>> topic : entry.getValue().partitions().entrySet()) {
                count += topic.getValue().size();
                for (int p : topic.getValue()) {
                    if (!before.isEmpty() && !had.getOrDefault(topic.getKey(), Set.of()).contains(p)) {
                        moved++;
                    }
                }
            }
            fewest = Math.min(fewest, count);
            most = Math.max(most, count);
            total += count;
        }
        return String.format("{\"fewest\": %d, \"most\": %d, \"assigned\": %d, \"moved\": %d}",
            fewest, most, total, moved);
    }
}
