"""DescribeClientQuotas (48): kgroups enforces no client quotas, so every filter matches none.

Answering it (rather than not advertising it) lets `kafka-configs --describe --entity-type
users` work against kgroups: Kafka's tool asks for a user's quotas beside its SCRAM
credentials and fails outright when the API is missing."""

from __future__ import annotations

import datetime
from typing import Any

from kgroups.broker.apis.api_keys import ApiKey
from kgroups.broker.apis.contract import HandlerRegistry, RequestContext, handles
from kgroups.broker.security import acl_enforcement as authz
from kgroups.broker.security.authorizer import Operation
from kgroups.broker.wire import build, kio_error, response_type
from kgroups.errors import ErrorCode


@handles(api_key=ApiKey.DESCRIBE_CLIENT_QUOTAS, min_version=0, max_version=1)
async def describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    return build(response_type(ApiKey.DESCRIBE_CLIENT_QUOTAS, ctx.api_version),
                 throttle_time=datetime.timedelta(0), error_code=kio_error(ErrorCode.NONE),
                 error_message=None, entries=())


def install(registry: HandlerRegistry) -> None:
    registry.register(describe_client_quotas)


# --- who may call these APIs (run when an authorizer is configured) -------------------------------

authz.rule(ApiKey.DESCRIBE_CLIENT_QUOTAS)(authz.on_cluster(
    Operation.DESCRIBE_CONFIGS, lambda ctx, _: authz.cluster_denied(ctx, entries=None)))
