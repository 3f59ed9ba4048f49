"""How a cluster broker follows the store's catalog: when the catalog version moves (another
broker created a topic, changed settings, ACLs or SCRAM users; announced by NOTIFY within
milliseconds, else seen by the listener's poll within kgroups.catalog.poll.interval.ms), the
membership runtime's listener hands the change to the event loop, which runs
`catalog_changed` once: every change made on any broker is in force here within that bound.
"""

from __future__ import annotations

from typing import Protocol

from kgroups.broker.dynamic_configs import DynamicBrokerConfigs
from kgroups.broker.security.state import Security
from kgroups.broker.topics import TopicCatalog
from kgroups.log.config import LogConfig


class CatalogReaders(Protocol):
    """What of a cluster broker follows the store's catalog (kgroups.broker.broker.Broker)."""

    topics: TopicCatalog
    security: Security
    dynamic_configs: DynamicBrokerConfigs
    log_config: LogConfig


def catalog_changed(broker: CatalogReaders) -> None:
    """Another broker changed the catalog: read broker settings, topics, credentials and ACLs
    again. Broker settings first, so the topics' settings are rebuilt on the new ones."""
    if broker.dynamic_configs.reload():
        broker.log_config = broker.dynamic_configs.log_config()
        broker.topics.rebase(broker.log_config)
    broker.topics.catalog_changed()
    broker.security.scram.reload()
    if broker.security.authorizer is not None:
        broker.security.authorizer.reload()
