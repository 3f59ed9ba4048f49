package kgroups.harness;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Function;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;

/**
 * What the assignor oracles share: one JSON spec per stdin line, one JSON answer per stdout
 * line ({"error": "..."} when the spec makes Kafka's code throw), the topics' partition counts
 * as a describer, and an assignment as {"assignment": {member: {topic id: [partitions]}}}.
 */
final class OracleIo {
    static final ObjectMapper JSON = new ObjectMapper();

    private OracleIo() { }

    static void serve(Function<JsonNode, ObjectNode> answer) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new BufferedWriter(
            new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));
        String line;
        while ((line = in.readLine()) != null) {
            ObjectNode answered;
            try {
                answered = answer.apply(JSON.readTree(line));
            } catch (RuntimeException e) {
                answered = JSON.createObjectNode().put("error", e.toString());
            }
            out.println(JSON.writeValueAsString(answered));
        }
        out.flush();
    }

    /** {topic id: partition count} as the assignors' describer (no racks). */
    static SubscribedTopicDescriber describer(JsonNode topics) {
        Map<Uuid, Integer> counts = new HashMap<>();
        topics.fields().forEachRemaining(
            e -> counts.put(Uuid.fromString(e.getKey()), e.getValue().asInt()));
        return new SubscribedTopicDescriber() {
            @Override
            public int numPartitions(Uuid topicId) {
                return counts.getOrDefault(topicId, -1);
            }

            @Override
            public Set<String> racksForPartition(Uuid topicId, int partition) {
                return Set.of();
            }
        };
    }

    /** The answer for an assignment: members and topics sorted, empty topics left out. */
    static ObjectNode listing(GroupAssignment result) {
        Map<String, Map<String, List<Integer>>> listing = new TreeMap<>();
        result.members().forEach((member, assignment) -> {
            Map<String, List<Integer>> topics = new TreeMap<>();
            assignment.partitions().forEach((topic, partitions) -> {
                if (!partitions.isEmpty()) {
                    topics.put(topic.toString(), partitions.stream().sorted().toList());
                }
            });
            listing.put(member, topics);
        });
        ObjectNode answer = JSON.createObjectNode();
        answer.set("assignment", JSON.valueToTree(listing));
        return answer;
    }
}
