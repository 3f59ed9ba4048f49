"""Fixtures every test directory can use: the real Apache Kafka broker and `kgroups serve`,
session-scoped, and `any_broker` over both (see tests/kafka_harness.py).

Hypothesis runs without its per-example deadline: CI has two cores shared with the brokers and
JVMs a run starts, so an example's wall time says nothing about the code under test."""

from hypothesis import settings

from kafka_harness import any_broker, kafka_broker, kgroups_broker

settings.register_profile("kgroups", deadline=None)
settings.load_profile("kgroups")

__all__ = ["any_broker", "kafka_broker", "kgroups_broker"]
