"""Which broker settings hold secrets, decided as Kafka decides it, so no value of one is ever
answered (DescribeConfigs) or logged.

A broker's settings carry passwords: `ssl.key.password`, `ssl.keystore.password`, and the JAAS
text of `listener.name.<listener>.plain.sasl.jaas.config` with every PLAIN user's password.
Kafka answers a setting's value as null, marked sensitive, when its ConfigDef type is PASSWORD
or when it cannot tell the type at all (a name it does not define: to be safe). A listener
override `listener.name.<listener>.<setting>` (or `.<mechanism>.<setting>` for the SASL
settings a listener sets per mechanism) has the type of the setting it overrides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kgroups.broker.kafka_settings import kafka_settings

# What kgroups logs in place of a secret's value.
HIDDEN = "[hidden]"
# The settings a listener may set per SASL mechanism (listener.name.L.<mechanism>.<setting>),
# Kafka's DynamicBrokerConfig.ListenerMechanismConfigs.
_MECHANISM_SETTINGS = ("sasl.jaas.config", "sasl.login.callback.handler.class",
                       "sasl.login.class", "sasl.server.callback.handler.class",
                       "connections.max.reauth.ms")
_LISTENER_OVERRIDE = re.compile(r"^listener\.name\.[^.]*\.(?P<base>.+)$")
# kgroups' own settings and Kafka's controller settings kgroups' brokers read (neither in
# Kafka's broker table): none is a secret. `kgroups.storage` is left out on purpose: its URL
# may carry a password, so it is hidden like any setting of unknown type.
_KGROUPS_SETTING_TYPES = {"kgroups.metrics.port": "INT", "kgroups.metrics.host": "STRING",
                          "kgroups.memory.exhausted.close.ms": "LONG",
                          "broker.session.timeout.ms": "INT",
                          "broker.heartbeat.interval.ms": "INT", "kgroups.lease.ms": "LONG",
                          "kgroups.catalog.poll.interval.ms": "LONG"}


def overridden_setting(name: str) -> str | None:
    """The setting a listener override stands for (`sasl.jaas.config` for
    `listener.name.sasl_ssl.plain.sasl.jaas.config`), None for a name that is not one."""
    match = _LISTENER_OVERRIDE.match(name)
    if match is None:
        return None
    base = match["base"]
    return next((setting for setting in _MECHANISM_SETTINGS if base.endswith(setting)), base)


def setting_type(name: str) -> str | None:
    """Kafka's ConfigDef type of a broker setting (a listener override: that of the setting it
    overrides), None when it cannot be told."""
    known = kafka_settings()
    if name in known:
        return known[name].type
    if name in _KGROUPS_SETTING_TYPES:
        return _KGROUPS_SETTING_TYPES[name]
    base = overridden_setting(name)
    return known[base].type if base is not None and base in known else None


def is_sensitive(name: str) -> bool:
    """Whether the setting's value is kept secret: a PASSWORD, or of a type nobody can tell."""
    kind = setting_type(name)
    return kind is None or kind == "PASSWORD"


def redacted(settings: Mapping[str, str]) -> dict[str, str]:
    """Broker settings with every secret's value replaced, for a log line."""
    return {name: HIDDEN if is_sensitive(name) else value for name, value in settings.items()}
