package kgroups.harness;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * A Java KafkaConsumer (classic protocol unless told otherwise) that a test drives one command
 * per stdin line, each answered by one JSON line on stdout (logs go to stderr):
 *
 *   subscribe t1,t2   -> {"ok": true}
 *   poll MS           -> {"records": [[topic, partition, offset, value]...],
 *                         "events": [["assigned"|"revoked"|"lost", [[topic, partition]...]]...]}
 *   commit            -> {"ok": true}            (commitSync of what poll returned)
 *   assignment        -> {"assignment": [[topic, partition]...], "generation": n, "member_id": id}
 *   close             -> {"ok": true}, then the process exits
 *
 * A command that throws answers {"error": "Class: message"} and the driver carries on, so a
 * test sees e.g. a CommitFailedException the way an application would. Arguments are consumer
 * properties as key=value; group.protocol is classic unless one of them sets it.
 */
public final class ConsumerDriver {
    private static final ObjectMapper JSON = LineProtocol.JSON;

    private final KafkaConsumer<String, String> consumer;
    private final List<ArrayNode> events = new ArrayList<>();

    private ConsumerDriver(Properties properties) {
        this.consumer = new KafkaConsumer<>(properties);
    }

    public static void main(String[] args) throws IOException {
        Properties defaults = new Properties();
        defaults.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        defaults.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        defaults.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        defaults.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Properties properties = LineProtocol.properties(defaults, args);
        properties.putIfAbsent(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        ConsumerDriver driver = new ConsumerDriver(properties);
        if (!LineProtocol.serve(driver::run)) {
            driver.consumer.close();
        }
    }

    private ObjectNode run(String command, String argument) {
        ObjectNode answer = JSON.createObjectNode();
        switch (command) {
            case "subscribe" -> {
                consumer.subscribe(Arrays.asList(argument.split(",")), new Recorder());
                answer.put("ok", true);
            }
            case "poll" -> {
                ArrayNode records = answer.putArray("records");
                try {
                    for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(Long.parseLong(argument)))) {
                        records.addArray().add(record.topic()).add(record.partition()).add(record.offset()).add(record.value());
                    }
                } finally {
                    answer.putArray("events").addAll(events);
                    events.clear();
                }
            }
            case "commit" -> {
                consumer.commitSync();
                answer.put("ok", true);
            }
            case "assignment" -> {
                answer.set("assignment", partitions(consumer.assignment()));
                answer.put("generation", consumer.groupMetadata().generationId());
                answer.put("member_id", consumer.groupMetadata().memberId());
            }
            case "close" -> {
                consumer.close();
                answer.put("ok", true);
            }
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
        return answer;
    }

    private static ArrayNode partitions(Collection<TopicPartition> partitions) {
        ArrayNode list = JSON.createArrayNode();
        partitions.stream()
            .sorted((a, b) -> a.topic().equals(b.topic()) ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()))
            .forEach(tp -> list.addArray().add(tp.topic()).add(tp.partition()));
        return list;
    }

    /** Records rebalance callbacks in the order the consumer ran them. */
    private final class Recorder implements ConsumerRebalanceListener {
        private void record(String kind, Collection<TopicPartition> partitions) {
            ArrayNode event = JSON.createArrayNode().add(kind);
            event.add(partitions(partitions));
            events.add(event);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            record("assigned", partitions);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            record("revoked", partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            record("lost", partitions);
        }
    }
}
