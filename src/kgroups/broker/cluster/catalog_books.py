"""ACLs, SCRAM credentials and dynamic broker settings of a cluster, kept in the store's catalog
(storage.catalog.Catalog) instead of a single node's files: the books the Authorizer, the
CredentialStore and DynamicBrokerConfigs write through. Every write is one transaction that
bumps the catalog version; catalog_sync.catalog_changed is what a broker runs when it sees the
version move, so a change made on any broker is in force on every broker within that bound.

Like the topics' store, the catalog is used on the event loop's thread: each write is one
short transaction, each reload a few small SELECTs.
"""

from __future__ import annotations

from collections.abc import Mapping

from kgroups.broker.dynamic_configs import CLUSTER_DEFAULT, PER_BROKER
from kgroups.broker.security.authorizer import AclBinding
from kgroups.broker.security.scram import ScramCredential, Users
from kgroups.storage.catalog import CLUSTER_DEFAULT_RESOURCE, AclRow, Catalog


def _row(acl: AclBinding) -> AclRow:
    return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
            acl.operation, acl.permission)


class StoreAcls:
    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def load(self) -> list[AclBinding]:
        return [AclBinding(*row) for row in self._catalog.acls()]

    def add(self, added: list[AclBinding], acls: list[AclBinding]) -> None:
        self._catalog.add_acls(_row(acl) for acl in added)

    def remove(self, removed: list[AclBinding], acls: list[AclBinding]) -> None:
        self._catalog.remove_acls(_row(acl) for acl in removed)


class StoreCredentials:
    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def load(self) -> Users:
        return {user: {mechanism: ScramCredential(*row) for mechanism, row in mechanisms.items()}
                for user, mechanisms in self._catalog.scram_credentials().items()}

    def apply(self, upserts: list[tuple[str, str, ScramCredential]],
              deletions: list[tuple[str, str]], users: Users) -> None:
        self._catalog.apply_scram(
            [(user, mechanism, (c.salt, c.stored_key, c.server_key, c.iterations))
             for user, mechanism, c in upserts], deletions)


class StoreBrokerConfigs:
    """The cluster default under Kafka's empty resource name, this broker's own layer under
    its node id (another broker's layer is not this broker's business)."""

    def __init__(self, catalog: Catalog, node_id: int) -> None:
        self._catalog = catalog
        self._resources = {CLUSTER_DEFAULT: CLUSTER_DEFAULT_RESOURCE, PER_BROKER: str(node_id)}

    def load(self) -> dict[str, dict[str, str]]:
        stored = self._catalog.broker_configs()
        return {scope: stored.get(resource, {}) for scope, resource in self._resources.items()}

    def save(self, scope: str, layer: Mapping[str, str]) -> None:
        self._catalog.set_broker_configs(self._resources[scope], layer)
