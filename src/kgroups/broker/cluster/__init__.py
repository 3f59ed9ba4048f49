"""A broker as one member of a kgroups cluster on PostgreSQL (docs/cluster.md).

In cluster mode (`kgroups.storage=postgresql://...`) the broker registers with the store,
holds leases on some partitions (`__consumer_offsets-N` included) and serves only those; the
others it names the leader of. `leadership.py` is what the rest of the broker asks about who
leads what; the membership runtime keeps it current from the store."""
