"""Moving a catalog between a single node's data directory and a PostgreSQL store, beside the
records (storage.transfer): topic settings, ACLs, SCRAM credentials and dynamic broker
settings, read and written through the same books a broker keeps them in (the files of
topic_configs, security and dynamic_configs; storage.catalog's tables), so nothing is
converted by hand and both sides stay readable by a broker.

A data directory's per-broker dynamic settings belong to one node: `node_id` names it in the
store (a single node's is 0). Exporting writes the cluster default and that node's layer;
other brokers' layers stay in the store, named in the summary. Topic settings of a topic the
other side does not hold (a leftover file of a deleted topic) are not moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kgroups.broker.dynamic_configs import CLUSTER_DEFAULT, DIRECTORY, PER_BROKER, BrokerConfigFiles
from kgroups.broker.security.authorizer import ACL_FILE, AclBinding, AclFile
from kgroups.broker.security.scram import CredentialFile, ScramCredential
from kgroups.broker.security.state import SCRAM_FILE
from kgroups.broker.topic_configs import CONFIG_DIRECTORY, TopicConfigStore
from kgroups.storage.catalog import CLUSTER_DEFAULT_RESOURCE, Catalog

# The data directory's entries the catalog is kept in (ACLs and SCRAM users under security/).
CATALOG_ENTRIES = frozenset({CONFIG_DIRECTORY, DIRECTORY, Path(ACL_FILE).parts[0]})


@dataclass
class CatalogSummary:
    topic_settings: int = 0
    acls: int = 0
    scram_users: int = 0
    broker_setting_layers: int = 0
    left_behind: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (f"{self.topic_settings} topics' settings, {self.acls} ACLs, "
                f"{self.scram_users} SCRAM users, {self.broker_setting_layers} dynamic broker "
                f"setting layers")


def _resources(node_id: int) -> dict[str, str]:
    """The data directory's scopes and the store's resources they are kept under."""
    return {CLUSTER_DEFAULT: CLUSTER_DEFAULT_RESOURCE, PER_BROKER: str(node_id)}


def import_catalog(data_dir: Path, catalog: Catalog, topics: set[str],
                   node_id: int) -> CatalogSummary:
    """The data directory's catalog into the store, whose `topics` are there already: ACLs
    and SCRAM users are added to the store's, settings replace those of their owner."""
    summary = CatalogSummary()
    for topic, overrides in TopicConfigStore(data_dir).load_all().items():
        if topic in topics and overrides:
            catalog.set_topic_configs(topic, overrides)
            summary.topic_settings += 1
    acls = AclFile(data_dir / ACL_FILE).load()
    if acls:
        catalog.add_acls((a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                          a.operation, a.permission) for a in acls)
        summary.acls = len(acls)
    users = CredentialFile(data_dir / SCRAM_FILE).load()
    if users:
        catalog.apply_scram([(user, mechanism, (c.salt, c.stored_key, c.server_key,
                                                c.iterations))
                             for user, mechanisms in users.items()
                             for mechanism, c in mechanisms.items()], [])
        summary.scram_users = len(users)
    for scope, layer in BrokerConfigFiles(data_dir).load().items():
        resource = _resources(node_id).get(scope)
        if resource is not None and layer:
            catalog.set_broker_configs(resource, layer)
            summary.broker_setting_layers += 1
    return summary


def export_catalog(catalog: Catalog, data_dir: Path, topics: set[str],
                   node_id: int) -> CatalogSummary:
    """The store's catalog into a data directory that holds the exported `topics`."""
    summary = CatalogSummary()
    settings = TopicConfigStore(data_dir)
    for topic, overrides in catalog.topic_configs().items():
        if topic in topics and overrides:
            settings.save(topic, overrides)
            summary.topic_settings += 1
    acls = [AclBinding(*row) for row in catalog.acls()]
    if acls:
        AclFile(data_dir / ACL_FILE).add(acls, acls)
        summary.acls = len(acls)
    stored_users = catalog.scram_credentials()
    if stored_users:
        users = {user: {mechanism: ScramCredential(*row) for mechanism, row in rows.items()}
                 for user, rows in stored_users.items()}
        CredentialFile(data_dir / SCRAM_FILE).apply([], [], users)
        summary.scram_users = len(users)
    layers = catalog.broker_configs()
    files = BrokerConfigFiles(data_dir)
    for scope, resource in _resources(node_id).items():
        if layers.get(resource):
            files.save(scope, layers[resource])
            summary.broker_setting_layers += 1
    summary.left_behind = [f"dynamic settings of node {resource}" for resource in sorted(layers)
                           if resource not in _resources(node_id).values()]
    return summary
