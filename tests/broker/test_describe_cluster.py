"""DescribeCluster on a broker of its own: itself, at the address it was reached on, as the
controller; a request for controller endpoints gets Kafka's UNSUPPORTED_ENDPOINT_TYPE."""

from __future__ import annotations

from broker_wire_helpers import connect
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest as V0
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest as V1
from kio.static.primitive import i8
from tests.broker.servers import InProcessBroker

from kgroups.broker.security.authorizer import ResourceType, all_operations
from kgroups.errors import ErrorCode

UNSUPPORTED_ENDPOINT_TYPE = 119


def test_a_broker_of_its_own_describes_itself(inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        answer = client.call(V0(include_cluster_authorized_operations=True))
    assert answer.error_code == ErrorCode.NONE
    assert answer.controller_id == 0 and answer.cluster_id == "kgroups-cluster"
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [
        (0, "127.0.0.1", inprocess_broker.port)]
    assert answer.cluster_authorized_operations == all_operations(ResourceType.CLUSTER)


def test_controller_endpoints_are_not_served_by_a_broker(
        inprocess_broker: InProcessBroker) -> None:
    with connect(inprocess_broker.port) as client:
        answer = client.call(V1(include_cluster_authorized_operations=False,
                                endpoint_type=i8(2)))
    assert answer.error_code == UNSUPPORTED_ENDPOINT_TYPE and answer.brokers == ()
