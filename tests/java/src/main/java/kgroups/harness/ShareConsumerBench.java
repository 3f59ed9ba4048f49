package kgroups.harness;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * bench/share_groups.py's load: N KafkaShareConsumers (threads of one JVM, implicit
 * acknowledgement: each poll accepts the records the previous poll returned) draining one
 * partition that already holds RECORDS records. The share group is created first with its start
 * offset at 0 (AlterShareGroupOffsets, as `kafka-share-groups --reset-offsets --to-earliest`
 * does), so the consumers read from the beginning. Prints one JSON line: the seconds from the
 * consumers' start until every record has been delivered and every consumer has closed (its last
 * acknowledgements sent), and the deliveries, distinct records and per-consumer counts.
 *
 * Arguments: BOOTSTRAP GROUP TOPIC CONSUMERS RECORDS [key=value consumer properties...]
 */
public final class ShareConsumerBench {
    private ShareConsumerBench() {
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String group = args[1];
        String topic = args[2];
        int consumers = Integer.parseInt(args[3]);
        long records = Long.parseLong(args[4]);
        Properties admin = new Properties();
        admin.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin client = Admin.create(admin)) {
            client.alterShareGroupOffsets(group, Map.of(new TopicPartition(topic, 0), 0L)).all().get();
        }
        Properties defaults = new Properties();
        defaults.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        defaults.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        defaults.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        defaults.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Properties properties = LineProtocol.properties(defaults, java.util.Arrays.copyOfRange(args, 5, args.length));

        ConcurrentHashMap.KeySetView<Long, Boolean> distinct = ConcurrentHashMap.newKeySet();
        AtomicLong deliveries = new AtomicLong();
        long[] perConsumer = new long[consumers];
        List<Thread> threads = new ArrayList<>();
        long started = System.nanoTime();
        for (int i = 0; i < consumers; i++) {
            int index = i;
            Thread thread = new Thread(() -> {
                try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(properties)) {
                    consumer.subscribe(List.of(topic));
                    while (distinct.size() < records) {
                        for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(100))) {
                            distinct.add(record.offset());
                            deliveries.incrementAndGet();
                            perConsumer[index]++;
                        }
                    }
                }
            }, "share-bench-" + i);
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        ObjectNode answer = LineProtocol.JSON.createObjectNode();
        answer.put("consumers", consumers).put("records", records).put("seconds", seconds)
            .put("deliveries", deliveries.get()).put("distinct", distinct.size());
        answer.putArray("per_consumer").addAll(java.util.Arrays.stream(perConsumer)
            .mapToObj(n -> LineProtocol.JSON.getNodeFactory().numberNode(n)).toList());
        System.out.println(LineProtocol.JSON.writeValueAsString(answer));
    }
}
