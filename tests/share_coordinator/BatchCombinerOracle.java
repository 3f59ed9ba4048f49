import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.kafka.coordinator.share.PersisterStateBatchCombiner;
import org.apache.kafka.server.share.persister.PersisterStateBatch;

/**
 * Kafka 4.3.1's own batch merge (PersisterStateBatchCombiner), line by line, as the judge of
 * kgroups.share_coordinator.batches. A line is "startOffset;batches so far;new batches", each
 * batch "first,last,state,count" and batches separated by spaces; the answer is the merged
 * batches in the same notation.
 */
public final class BatchCombinerOracle {
    private BatchCombinerOracle() {
    }

    private static List<PersisterStateBatch> batches(String text) {
        List<PersisterStateBatch> batches = new ArrayList<>();
        for (String batch : text.trim().split(" ")) {
            if (batch.isEmpty()) {
                continue;
            }
            String[] parts = batch.split(",");
            batches.add(new PersisterStateBatch(Long.parseLong(parts[0]), Long.parseLong(parts[1]),
                Byte.parseByte(parts[2]), Short.parseShort(parts[3])));
        }
        return batches;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] fields = line.split(";", -1);
            List<PersisterStateBatch> merged = new PersisterStateBatchCombiner(
                batches(fields[1]), batches(fields[2]), Long.parseLong(fields[0])).combineStateBatches();
            List<String> texts = new ArrayList<>();
            for (PersisterStateBatch batch : merged) {
                texts.add(batch.firstOffset() + "," + batch.lastOffset() + "," + batch.deliveryState()
                    + "," + batch.deliveryCount());
            }
            out.append(String.join(" ", texts)).append('\n');
        }
        System.out.print(out);
    }
}
