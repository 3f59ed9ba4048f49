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
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.SimpleAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;

/**
 * Runs Kafka's share-group assignor ("simple", KIP-932) over group specs, one JSON object per
 * stdin line, one answer per stdout line: {"assignment": {member: {topic id: [partitions]}}} or
 * {"error": "..."}. A spec is {"topics": {topic id: partition count}, "assignable": {topic id:
 * [initialized partitions]}, "members": [{"id", "topics": [topic ids], "owned": {topic id:
 * [partitions]}}]} with Kafka's base64 topic ids. Members go into a plain HashMap in the listed
 * order, as ServerAssignorOracle puts them; only the listed initialized partitions are
 * assignable, as the share group's coordinator allows.
 */
public final class ShareAssignorOracle {
    private ShareAssignorOracle() { }

    public static void main(String[] args) throws IOException {
        OracleIo.serve(ShareAssignorOracle::answer);
    }

    private static ObjectNode answer(JsonNode spec) {
        Map<Uuid, Set<Integer>> assignable = new HashMap<>();
        spec.get("assignable").fields().forEachRemaining(e -> {
            Set<Integer> partitions = new HashSet<>();
            e.getValue().forEach(p -> partitions.add(p.asInt()));
            assignable.put(Uuid.fromString(e.getKey()), partitions);
        });
        SubscribedTopicDescriber describer = OracleIo.describer(spec.get("topics"));

        Map<String, MemberSubscriptionAndAssignmentImpl> members = new HashMap<>();
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
                List<Integer> partitions = new ArrayList<>();
                entry.getValue().forEach(p -> partitions.add(p.asInt()));
                owned.put(Uuid.fromString(entry.getKey()), new HashSet<>(partitions));
            }
            members.put(id, new MemberSubscriptionAndAssignmentImpl(
                Optional.empty(), Optional.empty(), topics, new Assignment(owned)));
        }
        boolean homogeneous = subscriptions.stream().allMatch(s -> s.equals(subscriptions.get(0)));
        GroupSpecImpl groupSpec = new GroupSpecImpl(Collections.unmodifiableMap(members),
            homogeneous ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS,
            Map.of(), Optional.of(assignable));
        GroupAssignment result = new SimpleAssignor().assign(groupSpec, describer);

        return OracleIo.listing(result);
    }
}
