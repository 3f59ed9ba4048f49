"""kgroups: Kafka's consumer-group system (coordinator, __consumer_offsets log, wire-compatible
broker, partition assignors, group member, Spark pipeline) in Python."""

__version__ = "0.1.0"
