"""The tests here use the `kafka_broker` of kgroups' pytest plugin, as a user's tests would;
the repository's root conftest.py gives that name to a real Apache Kafka for the other tests,
and a directory's conftest.py overrides its parent's."""

from kgroups.testing.pytest_plugin import kafka_broker

__all__ = ["kafka_broker"]
