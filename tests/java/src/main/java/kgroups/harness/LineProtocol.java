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
import java.util.Properties;
import java.util.function.Function;

/**
 * The drivers' shared protocol: client properties from key=value arguments, then one command
 * per stdin line ("name argument"), each answered by one JSON line on stdout. A command that
 * throws answers {"error": "Class: message"} and the driver carries on, so a test sees an
 * exception the way an application would.
 */
final class LineProtocol {
    static final ObjectMapper JSON = new ObjectMapper();

    /** One command of a driver: its answer. */
    interface Commands {
        ObjectNode run(String command, String argument);
    }

    private LineProtocol() {
    }

    /** `defaults` overridden by the key=value arguments. */
    static Properties properties(Properties defaults, String[] args) {
        Properties properties = new Properties();
        properties.putAll(defaults);
        for (String arg : args) {
            int equals = arg.indexOf('=');
            if (equals <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + arg);
            }
            properties.put(arg.substring(0, equals), arg.substring(equals + 1));
        }
        return properties;
    }

    static ObjectNode error(Throwable e) {
        return JSON.createObjectNode().put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
    }

    /**
     * Answers stdin's commands until "close" (answered, then true) or the end of input (false:
     * the caller closes its client).
     */
    static boolean serve(Commands commands) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String[] words = line.trim().split(" ", 2);
            ObjectNode answer;
            try {
                answer = commands.run(words[0], words.length > 1 ? words[1] : "");
            } catch (RuntimeException e) {
                answer = error(e);
            }
            System.out.println(JSON.writeValueAsString(answer));
            System.out.flush();
            if (words[0].equals("close")) {
                return true;
            }
        }
        return false;
    }

    /**
     * An oracle's loop: each stdin line is a JSON spec answered by one JSON line (an exception
     * answers {"error": "Class: message"}), output flushed once at the end of input.
     */
    static void answerEachSpec(Function<JsonNode, ObjectNode> oracle) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new BufferedWriter(
            new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));
        String line;
        while ((line = in.readLine()) != null) {
            ObjectNode answer;
            try {
                answer = oracle.apply(JSON.readTree(line));
            } catch (RuntimeException e) {
                answer = error(e);
            }
            out.println(JSON.writeValueAsString(answer));
        }
        out.flush();
    }
}
