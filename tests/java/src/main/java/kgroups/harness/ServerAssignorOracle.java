package kgroups.harness;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;

/**
 * Runs Kafka's own server-side assignors (KIP-848 `uniform` and `range`) over group specs, one
 * JSON object per stdin line, one answer per stdout line: {"assignment": {member: {topic id:
 * [partitions]}}} or {"error": "..."}. A spec is {"assignor", "topics": {topic id: partition
 * count}, "members": [{"id", "instance", "rack", "topics": [topic ids], "owned": {topic id:
 * [partitions]}}]} with Kafka's base64 topic ids.
 *
 * The group spec is built the way the group coordinator builds it: members put into a plain
 * HashMap in the listed order (so the assignors see Java's HashMap order over member ids),
 * subscriptions as hash sets of topic ids, current assignments as a record replay gives them
 * (a HashMap of topic id to a HashSet of the record's partitions), and the subscription type
 * HOMOGENEOUS exactly when every member subscribes to the same topics.
 */
public final class ServerAssignorOracle {
    private ServerAssignorOracle() { }

    public static void main(String[] args) throws IOException {
        OracleIo.serve(ServerAssignorOracle::answer);
    }

    private static ObjectNode answer(JsonNode spec) {
        ConsumerGroupPartitionAssignor assignor =
            spec.get("assignor").asText().equals("range") ? new RangeAssignor() : new UniformAssignor();
        SubscribedTopicDescriber describer = OracleIo.describer(spec.get("topics"));

        Map<String, MemberSubscriptionAndAssignmentImpl> members = new HashMap<>();
        Map<Uuid, Map<Integer, String>> owners = new HashMap<>();
        List<Set<Uuid>> subscriptions = new ArrayList<>();
        for (JsonNode member : spec.get("members")) {
            String id = member.get("id").asText();
            Set<Uuid> topics = new HashSet<>();
            member.get("topics").forEach(t -> topics.add(Uuid.fromString(t.asText())));
            subscriptions.add(topics);
            Map<Uuid, Set<Integer>> owned = new HashMap<>();
            Iterator<Map.Entry<String, JsonNode>> held = member.get("owned").fields();
            while (held.hasNext()) {
                Map.Entry<String, JsonNode> entry = held.next();
                Uuid topic = Uuid.fromString(entry.getKey());
                List<Integer> partitions = new ArrayList<>();
                entry.getValue().forEach(p -> partitions.add(p.asInt()));
                owned.put(topic, new HashSet<>(partitions));
                partitions.forEach(p -> owners.computeIfAbsent(topic, t -> new HashMap<>()).put(p, id));
            }
            members.put(id, new MemberSubscriptionAndAssignmentImpl(
                optional(member, "rack"), optional(member, "instance"), topics, new Assignment(owned)));
        }
        boolean homogeneous = subscriptions.stream().allMatch(s -> s.equals(subscriptions.get(0)));
        GroupSpecImpl groupSpec = new GroupSpecImpl(Collections.unmodifiableMap(members),
            homogeneous ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS, owners);
        GroupAssignment result = assignor.assign(groupSpec, describer);

        return OracleIo.listing(result);
    }

    private static Optional<String> optional(JsonNode member, String field) {
        JsonNode value = member.get(field);
        return value == null || value.isNull() ? Optional.empty() : Optional.of(value.asText());
    }
}
