"""Fixtures every test directory can use: the real Apache Kafka broker and `kgroups serve`,
session-scoped, and `any_broker` over both (see tests/kafka_harness.py)."""

from kafka_harness import any_broker, kafka_broker, kgroups_broker

__all__ = ["any_broker", "kafka_broker", "kgroups_broker"]
