package kgroups.harness;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A Java transactional KafkaProducer that a test drives one command per stdin line, each
 * answered by one JSON line on stdout (logs go to stderr):
 *
 *   init                        -> {"ok": true}   (initTransactions)
 *   begin                       -> {"ok": true}
 *   send TOPIC PARTITION VALUE  -> {"offset": n}  (waits for the broker's answer)
 *   commit | abort              -> {"ok": true}
 *   close                       -> {"ok": true}, then the process exits
 *
 * A command that throws answers {"error": "Class: message"} (the cause's class for a failed
 * send) and the driver carries on, so a test sees e.g. a ProducerFencedException the way an
 * application would. Arguments are producer properties as key=value (transactional.id among
 * them).
 */
public final class TransactionalProducerDriver {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final KafkaProducer<String, String> producer;

    private TransactionalProducerDriver(Properties properties) {
        this.producer = new KafkaProducer<>(properties);
    }

    public static void main(String[] args) throws IOException {
        Properties properties = new Properties();
        properties.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        properties.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        for (String arg : args) {
            int equals = arg.indexOf('=');
            if (equals <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + arg);
            }
            properties.put(arg.substring(0, equals), arg.substring(equals + 1));
        }
        TransactionalProducerDriver driver = new TransactionalProducerDriver(properties);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String[] words = line.trim().split(" ", 2);
            ObjectNode answer;
            try {
                answer = driver.run(words[0], words.length > 1 ? words[1] : "");
            } catch (RuntimeException e) {
                answer = error(e);
            }
            System.out.println(JSON.writeValueAsString(answer));
            System.out.flush();
            if (words[0].equals("close")) {
                return;
            }
        }
        driver.producer.close(Duration.ZERO);
    }

    private static ObjectNode error(Throwable e) {
        return JSON.createObjectNode().put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
    }

    private ObjectNode run(String command, String argument) {
        ObjectNode answer = JSON.createObjectNode();
        switch (command) {
            case "init" -> producer.initTransactions();
            case "begin" -> producer.beginTransaction();
            case "send" -> {
                String[] parts = argument.split(" ", 3);
                ProducerRecord<String, String> record =
                        new ProducerRecord<>(parts[0], Integer.parseInt(parts[1]), null, parts[2]);
                try {
                    return answer.put("offset", producer.send(record).get().offset());
                } catch (ExecutionException e) {
                    return error(e.getCause());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return error(e);
                }
            }
            case "commit" -> producer.commitTransaction();
            case "abort" -> producer.abortTransaction();
            case "close" -> producer.close(Duration.ofSeconds(5));
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
        return answer.put("ok", true);
    }
}
