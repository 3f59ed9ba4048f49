package kgroups.harness;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
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
 * send; LineProtocol), so a test sees e.g. a ProducerFencedException the way an application
 * would. Arguments are producer properties as key=value (transactional.id among them).
 */
public final class TransactionalProducerDriver {
    private final KafkaProducer<String, String> producer;

    private TransactionalProducerDriver(Properties properties) {
        this.producer = new KafkaProducer<>(properties);
    }

    public static void main(String[] args) throws IOException {
        Properties defaults = new Properties();
        defaults.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        defaults.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        TransactionalProducerDriver driver =
                new TransactionalProducerDriver(LineProtocol.properties(defaults, args));
        if (!LineProtocol.serve(driver::run)) {
            driver.producer.close(Duration.ZERO);
        }
    }

    private ObjectNode run(String command, String argument) {
        ObjectNode answer = LineProtocol.JSON.createObjectNode();
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
                    return LineProtocol.error(e.getCause());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return LineProtocol.error(e);
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
