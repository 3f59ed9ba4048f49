"""The log: RecordBatch v2, partition logs in Kafka-layout segment files, durability, compaction."""
