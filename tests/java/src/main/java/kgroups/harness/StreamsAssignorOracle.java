package kgroups.harness;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.coordinator.group.streams.assignor.AssignmentMemberSpec;
import org.apache.kafka.coordinator.group.streams.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.streams.assignor.GroupSpecImpl;
import org.apache.kafka.coordinator.group.streams.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.streams.assignor.StickyTaskAssignor;
import org.apache.kafka.coordinator.group.streams.assignor.TopologyDescriber;

/**
 * Runs Kafka's own streams-group task assignor (`sticky`, KIP-1071) over group specs, one JSON
 * object per stdin line, one answer per stdout line: {"assignment": {member: {"active": {subtopology:
 * [partitions]}, "standby": {...}, "warmup": {...}}}} or {"error": "ExceptionClass: message"}.
 *
 * A spec is {"configs": {name: value}, "subtopologies": [{"id", "tasks", "stateful"}], "members":
 * [{"id", "process", "instance", "rack", "tags": {k: v}, "active": {subtopology: [partitions]},
 * "standby": {...}, "warmup": {...}}]}. The member map is built the way the group coordinator's
 * target-assignment builder builds it: a plain HashMap, members put in the listed order.
 * Subtopologies are described in the listed order. With
 * "repeat": n, the assignment is run n more times and "best_ms" is the fastest of those runs.
 */
public final class StreamsAssignorOracle {
    private static final ObjectMapper JSON = new ObjectMapper();

    private StreamsAssignorOracle() { }

    public static void main(String[] args) throws IOException {
        LineProtocol.answerEachSpec(StreamsAssignorOracle::answer);
    }

    private static ObjectNode answer(JsonNode spec) {
        List<String> order = new ArrayList<>();
        Map<String, Integer> taskCounts = new HashMap<>();
        Set<String> stateful = new HashSet<>();
        for (JsonNode subtopology : spec.get("subtopologies")) {
            String id = subtopology.get("id").asText();
            order.add(id);
            taskCounts.put(id, subtopology.get("tasks").asInt());
            if (subtopology.get("stateful").asBoolean()) {
                stateful.add(id);
            }
        }
        TopologyDescriber describer = new TopologyDescriber() {
            @Override
            public List<String> subtopologies() {
                return order;
            }

            @Override
            public int maxNumInputPartitions(String subtopologyId) {
                Integer count = taskCounts.get(subtopologyId);
                if (count == null) {
                    throw new NoSuchElementException("unknown subtopology " + subtopologyId);
                }
                return count;
            }

            @Override
            public boolean isStateful(String subtopologyId) {
                return stateful.contains(subtopologyId);
            }
        };

        Map<String, AssignmentMemberSpec> members = new HashMap<>();
        for (JsonNode member : spec.get("members")) {
            String id = member.get("id").asText();
            Map<String, String> tags = new HashMap<>();
            JsonNode tagNode = member.get("tags");
            if (tagNode != null) {
                tagNode.fields().forEachRemaining(e -> tags.put(e.getKey(), e.getValue().asText()));
            }
            members.put(id, new AssignmentMemberSpec(
                optional(member, "instance"), optional(member, "rack"),
                tasks(member.get("active")), tasks(member.get("standby")), tasks(member.get("warmup")),
                member.get("process").asText(), tags, Map.of(), Map.of()));
        }
        Map<String, String> configs = new HashMap<>();
        spec.get("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));

        GroupSpecImpl groupSpec = new GroupSpecImpl(Collections.unmodifiableMap(members), configs);
        GroupAssignment result = new StickyTaskAssignor().assign(groupSpec, describer);
        long best = Long.MAX_VALUE;
        for (int run = 0; run < spec.path("repeat").asInt(0); run++) {
            long started = System.nanoTime();
            new StickyTaskAssignor().assign(groupSpec, describer);
            best = Math.min(best, System.nanoTime() - started);
        }

        Map<String, Map<String, Map<String, List<Integer>>>> listing = new TreeMap<>();
        result.members().forEach((member, assignment) -> listing.put(member, listed(assignment)));
        ObjectNode answer = JSON.createObjectNode();
        answer.set("assignment", JSON.valueToTree(listing));
        if (best != Long.MAX_VALUE) {
            answer.put("best_ms", best / 1e6);
        }
        return answer;
    }

    /** A task map as a target-assignment record replays it: subtopology to a hash set. */
    private static Map<String, Set<Integer>> tasks(JsonNode node) {
        Map<String, Set<Integer>> tasks = new HashMap<>();
        if (node == null) {
            return tasks;
        }
        Iterator<Map.Entry<String, JsonNode>> fields = node.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> entry = fields.next();
            Set<Integer> partitions = new HashSet<>();
            entry.getValue().forEach(p -> partitions.add(p.asInt()));
            tasks.put(entry.getKey(), partitions);
        }
        return tasks;
    }

    private static Map<String, Map<String, List<Integer>>> listed(MemberAssignment assignment) {
        Map<String, Map<String, List<Integer>>> kinds = new TreeMap<>();
        kinds.put("active", sorted(assignment.activeTasks()));
        kinds.put("standby", sorted(assignment.standbyTasks()));
        kinds.put("warmup", sorted(assignment.warmupTasks()));
        return kinds;
    }

    private static Map<String, List<Integer>> sorted(Map<String, Set<Integer>> tasks) {
        Map<String, List<Integer>> out = new TreeMap<>();
        tasks.forEach((subtopology, partitions) -> out.put(subtopology, partitions.stream().sorted().toList()));
        return out;
    }

    private static Optional<String> optional(JsonNode member, String field) {
        JsonNode value = member.get(field);
        return value == null || value.isNull() ? Optional.empty() : Optional.of(value.asText());
    }
}
