"""Where a cluster of kgroups brokers keeps what must outlive any one of them: PostgreSQL (or a
compatible service), written through `PostgresStore`. Each partition's records are the
RecordBatch v2 bytes Kafka writes, at the offsets Kafka would give them, and every append is
conditional on the writer holding the partition's lease at the current leader epoch, checked
in the same database transaction: a broker that lost its lease (paused, cut off) can never
write again. `transfer` moves a local data directory's topics into a store and back.
"""
