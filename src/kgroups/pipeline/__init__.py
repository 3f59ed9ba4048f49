"""The PySpark pipeline: __consumer_offsets segment files to offset, group-history, rebalance and
lag tables plus an HTML report (`kgroups analyze`). Decoding reuses `kgroups.log` and
`kgroups.records`, so the project keeps a single reader of Kafka's byte formats."""
