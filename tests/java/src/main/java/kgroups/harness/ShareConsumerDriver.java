package kgroups.harness;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * A Java KafkaShareConsumer (KIP-932) in explicit acknowledgement mode that a test drives one
 * command per stdin line, each answered by one JSON line on stdout (logs go to stderr):
 *
 *   subscribe t1,t2   -> {"ok": true}
 *   poll MS           -> {"records": [[topic, partition, offset, value, delivery_count]...],
 *                         "acknowledged": [[topic, partition, [offset...], error|null]...]}
 *   acknowledge JSON  -> {"ok": true}   JSON: [[topic, partition, offset, "ACCEPT"|"RELEASE"|
 *                                       "REJECT"|"RENEW"]...], each a record the last poll returned
 *   commit            -> {"results": [[topic, partition, error|null]...]}   (commitSync)
 *   close             -> {"ok": true}, then the process exits
 *
 * The test chooses each record's acknowledgement (so it can release, reject, or hold a record
 * past its acquisition lock). "acknowledged" carries what the consumer's acknowledgement commit
 * callback saw since the last poll: acknowledgements the consumer sent on its own (with a poll,
 * or on close). A command that throws answers {"error": "Class: message"} and the driver carries
 * on. Arguments are consumer properties as key=value; share.acknowledgement.mode is explicit
 * unless one of them sets it.
 */
public final class ShareConsumerDriver {
    private static final ObjectMapper JSON = LineProtocol.JSON;

    private final KafkaShareConsumer<String, String> consumer;
    /** The last poll's records by topic, partition and offset: what `acknowledge` names. */
    private final Map<String, ConsumerRecord<String, String>> polled = new HashMap<>();
    private final List<ArrayNode> acknowledged = new ArrayList<>();

    private ShareConsumerDriver(Properties properties) {
        this.consumer = new KafkaShareConsumer<>(properties);
        this.consumer.setAcknowledgementCommitCallback((offsets, exception) -> offsets.forEach((partition, sent) -> {
            ArrayNode entry = JSON.createArrayNode().add(partition.topic()).add(partition.partition());
            ArrayNode list = entry.addArray();
            sent.stream().sorted().forEach(list::add);
            entry.add(exception == null ? null : describe(exception));
            acknowledged.add(entry);
        }));
    }

    public static void main(String[] args) throws IOException {
        Properties defaults = new Properties();
        defaults.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        defaults.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        defaults.put("share.acknowledgement.mode", "explicit");
        ShareConsumerDriver driver = new ShareConsumerDriver(LineProtocol.properties(defaults, args));
        if (!LineProtocol.serve(driver::run)) {
            driver.consumer.close();
        }
    }

    private static String key(String topic, int partition, long offset) {
        return topic + "\u0000" + partition + "\u0000" + offset;
    }

    private static String describe(Exception e) {
        return e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    private ObjectNode run(String command, String argument) {
        ObjectNode answer = JSON.createObjectNode();
        switch (command) {
            case "subscribe" -> {
                consumer.subscribe(Arrays.asList(argument.split(",")));
                answer.put("ok", true);
            }
            case "poll" -> {
                ArrayNode records = answer.putArray("records");
                try {
                    polled.clear();
                    for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(Long.parseLong(argument)))) {
                        polled.put(key(record.topic(), record.partition(), record.offset()), record);
                        Optional<Short> count = record.deliveryCount();
                        records.addArray().add(record.topic()).add(record.partition()).add(record.offset())
                            .add(record.value()).add(count.isPresent() ? count.get() : null);
                    }
                } finally {
                    answer.putArray("acknowledged").addAll(acknowledged);
                    acknowledged.clear();
                }
            }
            case "acknowledge" -> {
                for (JsonNode item : parse(argument)) {
                    String name = key(item.get(0).asText(), item.get(1).asInt(), item.get(2).asLong());
                    ConsumerRecord<String, String> record = polled.get(name);
                    if (record == null) {
                        throw new IllegalArgumentException("not a record of the last poll: " + item);
                    }
                    consumer.acknowledge(record, AcknowledgeType.valueOf(item.get(3).asText()));
                }
                answer.put("ok", true);
            }
            case "commit" -> {
                ArrayNode results = answer.putArray("results");
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> result : consumer.commitSync().entrySet()) {
                    results.addArray().add(result.getKey().topic()).add(result.getKey().partition())
                        .add(result.getValue().map(ShareConsumerDriver::describe).orElse(null));
                }
            }
            case "close" -> {
                consumer.close();
                answer.put("ok", true);
            }
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
        return answer;
    }

    private static JsonNode parse(String argument) {
        try {
            return JSON.readTree(argument);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("acknowledge takes a JSON list: " + e.getOriginalMessage());
        }
    }
}
