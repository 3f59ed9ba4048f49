package kgroups.harness;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupAssignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * Runs Kafka's own assignors over kgroups' JSON scenarios (the `kgroups assign` shape plus a
 * "strategy" field), one scenario per stdin line, one answer per stdout line:
 * {"assignment": {member: {topic: [partitions]}}, "stable": bool} or {"error": "..."}.
 *
 * Each member's subscription is built as a Java consumer would send it: its own assignor
 * instance is told its previous assignment and generation (onAssignment) and supplies the user
 * data; the eager sticky assignor's member owns nothing in the subscription (it revoked all
 * before joining), the cooperative one reports its owned partitions and generation.
 *
 * The sticky assignors iterate hash maps, so for some inputs their output depends on member
 * ids' hash codes and on map order rather than on the group itself. "stable" says whether the
 * same group, with every member id and topic renamed in an order-preserving way and the
 * members listed in other orders, got the same assignment; only then is Kafka's output a
 * function of the group and fit to be compared exactly.
 */
public final class AssignorOracle {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String[] VARIANT_PREFIXES = {
        "", "~", "zq.", "a", "Q-", "__", "x9", "m/", "7", "kk", "%", "b.b", "Zz", "0-", "!", "q"};

    private record Member(String id, List<String> topics, Map<String, List<Integer>> owned,
                          int generation, String rack, String instanceId) { }

    private AssignorOracle() { }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new BufferedWriter(
            new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode answer;
            try {
                answer = answer(JSON.readTree(line));
            } catch (RuntimeException | IOException e) {
                answer = JSON.createObjectNode().put("error", e.toString());
            }
            out.println(JSON.writeValueAsString(answer));
        }
        out.flush();
    }

    private static ObjectNode answer(JsonNode scenario) {
        String strategy = scenario.get("strategy").asText();
        List<Member> members = parseMembers(scenario.get("members"));
        boolean sticky = strategy.equals("sticky") || strategy.equals("cooperative-sticky");
        Map<String, Map<String, List<Integer>>> first = null;
        boolean stable = true;
        int variants = sticky ? VARIANT_PREFIXES.length : 1;
        for (int variant = 0; variant < variants; variant++) {
            List<Member> ordered = reorder(members, variant);
            Map<String, Map<String, List<Integer>>> result =
                run(strategy, scenario.get("topics"), ordered, VARIANT_PREFIXES[variant]);
            if (first == null) {
                first = result;
            } else if (!first.equals(result)) {
                stable = false;
            }
        }
        ObjectNode answer = JSON.createObjectNode();
        answer.set("assignment", JSON.valueToTree(first));
        answer.put("stable", stable);
        return answer;
    }

    /** Variant 0 keeps the scenario's member order; the others reverse or rotate it in turn. */
    private static List<Member> reorder(List<Member> members, int variant) {
        List<Member> ordered = new ArrayList<>(members);
        if (variant % 3 == 1) {
            Collections.reverse(ordered);
        } else if (variant % 3 == 2) {
            Collections.rotate(ordered, variant);
        }
        return ordered;
    }

    private static List<Member> parseMembers(JsonNode node) {
        List<Member> members = new ArrayList<>();
        Iterator<Map.Entry<String, JsonNode>> fields = node.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> entry = fields.next();
            JsonNode spec = entry.getValue();
            List<String> topics = new ArrayList<>();
            spec.get("topics").forEach(t -> topics.add(t.asText()));
            Map<String, List<Integer>> owned = new LinkedHashMap<>();
            JsonNode ownedNode = spec.get("owned");
            if (ownedNode != null) {
                ownedNode.fields().forEachRemaining(o -> {
                    List<Integer> partitions = new ArrayList<>();
                    o.getValue().forEach(p -> partitions.add(p.asInt()));
                    owned.put(o.getKey(), partitions);
                });
            }
            int generation = spec.has("generation") ? spec.get("generation").asInt() : -1;
            String rack = spec.hasNonNull("rack") ? spec.get("rack").asText() : null;
            String instanceId = spec.hasNonNull("instance_id") ? spec.get("instance_id").asText() : null;
            members.add(new Member(entry.getKey(), topics, owned, generation, rack, instanceId));
        }
        return members;
    }

    private static ConsumerPartitionAssignor create(String strategy) {
        return switch (strategy) {
            case "range" -> new RangeAssignor();
            case "roundrobin" -> new RoundRobinAssignor();
            case "sticky" -> new StickyAssignor();
            case "cooperative-sticky" -> new CooperativeStickyAssignor();
            default -> throw new IllegalArgumentException("unknown strategy " + strategy);
        };
    }

    /** Topics become Kafka metadata: one node per replica rack, a rackless node otherwise. */
    private static Cluster cluster(JsonNode topics, String prefix) {
        Node rackless = new Node(0, "localhost", 9092, null);
        Map<String, Node> rackNodes = new HashMap<>();
        List<PartitionInfo> partitions = new ArrayList<>();
        Iterator<Map.Entry<String, JsonNode>> fields = topics.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> entry = fields.next();
            JsonNode spec = entry.getValue();
            int count = spec.isObject() ? spec.get("partitions").asInt() : spec.asInt();
            JsonNode racks = spec.isObject() ? spec.get("racks") : null;
            for (int p = 0; p < count; p++) {
                List<Node> replicas = new ArrayList<>();
                if (racks != null && !racks.isNull()) {
                    for (JsonNode rack : racks.get(p)) {
                        replicas.add(rackNodes.computeIfAbsent(rack.asText(),
                            r -> new Node(rackNodes.size() + 1, "localhost", 9092, r)));
                    }
                }
                if (replicas.isEmpty()) {
                    replicas.add(rackless);
                }
                Node[] replicaArray = replicas.toArray(new Node[0]);
                partitions.add(new PartitionInfo(prefix + entry.getKey(), p, replicaArray[0],
                    replicaArray, replicaArray));
            }
        }
        List<Node> nodes = new ArrayList<>(rackNodes.values());
        nodes.add(rackless);
        return new Cluster("oracle", nodes, partitions, Collections.emptySet(), Collections.emptySet());
    }

    private static Subscription subscription(String strategy, Member member, String prefix) {
        List<String> topics = new ArrayList<>();
        member.topics().forEach(t -> topics.add(prefix + t));
        List<TopicPartition> owned = new ArrayList<>();
        member.owned().forEach((topic, partitions) ->
            partitions.forEach(p -> owned.add(new TopicPartition(prefix + topic, p))));
        ConsumerPartitionAssignor own = create(strategy);
        if (!owned.isEmpty()) {
            own.onAssignment(new Assignment(owned), new ConsumerGroupMetadata(
                "oracle", member.generation(), prefix + member.id(), Optional.ofNullable(member.instanceId())));
        }
        ByteBuffer userData = own.subscriptionUserData(new HashSet<>(topics));
        List<TopicPartition> reported = strategy.equals("cooperative-sticky") ? owned : List.of();
        Subscription subscription = new Subscription(topics, userData, reported,
            member.generation(), Optional.ofNullable(member.rack()));
        subscription.setGroupInstanceId(Optional.ofNullable(member.instanceId()));
        return subscription;
    }

    private static Map<String, Map<String, List<Integer>>> run(
            String strategy, JsonNode topics, List<Member> members, String prefix) {
        Map<String, Subscription> subscriptions = new LinkedHashMap<>();
        for (Member member : members) {
            subscriptions.put(prefix + member.id(), subscription(strategy, member, prefix));
        }
        GroupAssignment assigned = create(strategy).assign(
            cluster(topics, prefix), new GroupSubscription(subscriptions));
        Map<String, Map<String, List<Integer>>> result = new TreeMap<>();
        for (Member member : members) {
            Map<String, List<Integer>> byTopic = new TreeMap<>();
            Assignment assignment = assigned.groupAssignment().get(prefix + member.id());
            if (assignment != null) {
                for (TopicPartition tp : assignment.partitions()) {
                    byTopic.computeIfAbsent(tp.topic().substring(prefix.length()),
                        t -> new ArrayList<>()).add(tp.partition());
                }
            }
            byTopic.values().forEach(Collections::sort);
            result.put(member.id(), byTopic);
        }
        return result;
    }
}
