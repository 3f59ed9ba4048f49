package kgroups.harness;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' word count, run as a user runs it: lines from INPUT, split into lower-case words,
 * re-keyed by word (the groupBy writes them to the repartition topic APPLICATION_ID-words-repartition,
 * which Streams creates and trims with DeleteRecords once the records are committed), counted in the
 * state store "counts" (changelog APPLICATION_ID-counts-changelog) and every new count written to
 * OUTPUT as word -> count (a String key, a Long value: 8 bytes big-endian).
 *
 * Arguments: INPUT OUTPUT, then Streams properties as key=value (bootstrap.servers,
 * application.id and state.dir at least). One line on stdout per state change ("state RUNNING"),
 * and "error Class: message" if a stream thread dies (the client then shuts down); the log goes to
 * stderr. A "tasks" line on stdin is answered by one line "tasks ACTIVE STANDBY": the task ids this
 * instance holds now (as "0_1", comma-separated, sorted; "-" for none), so a test sees how the
 * group's assignor spread the tasks (with group.protocol=streams the broker's). A "close" line on
 * stdin, or stdin's end, closes Streams and exits 0.
 */
public final class WordCountStreams {
    private WordCountStreams() {
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        if (args.length < 2) {
            throw new IllegalArgumentException("usage: INPUT OUTPUT [key=value...]");
        }
        Properties properties = new Properties();
        properties.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        properties.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        for (String arg : Arrays.copyOfRange(args, 2, args.length)) {
            int equals = arg.indexOf('=');
            if (equals <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + arg);
            }
            properties.put(arg.substring(0, equals), arg.substring(equals + 1));
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[0], Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.<String, String>as("words")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(args[1], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), properties);
        // Streams calls the listener on its close thread, a daemon one: main waits for the
        // NOT_RUNNING line below, or the JVM could exit before it is said.
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            say("state " + now);
            if (now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(error -> {
            say("error " + error.getClass().getSimpleName() + ": " + error.getMessage());
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.trim().equals("close")) {
            if (line.trim().equals("tasks")) {
                say("tasks " + taskIds(streams, true) + " " + taskIds(streams, false));
            }
        }
        if (streams.close(Duration.ofSeconds(30))) {
            stopped.await(10, TimeUnit.SECONDS);
        }
    }

    /** The active (or standby) task ids of every local stream thread, sorted; "-" for none. */
    private static String taskIds(KafkaStreams streams, boolean active) {
        List<String> ids = new ArrayList<>();
        for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
            for (TaskMetadata task : active ? thread.activeTasks() : thread.standbyTasks()) {
                ids.add(task.taskId().toString());
            }
        }
        Collections.sort(ids);
        return ids.isEmpty() ? "-" : String.join(",", ids);
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
