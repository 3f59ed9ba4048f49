"""Regular-expression subscriptions (ConsumerGroupHeartbeat v1 SubscribedTopicRegex), resolved
on the coordinator as Kafka 4.x resolves them.

Kafka compiles a member's regex with RE2/J and a regex matches a topic only when it matches the
whole name. kgroups uses RE2 itself (the `google-re2` binding): same syntax, same linear-time
matching, and none of Python's `re` extensions (look-arounds, back-references) that Kafka would
refuse. A syntax error is answered with RE2/J's description of it, so the error message a client
logs is Kafka's. Internal topics are not filtered out: Kafka 4.3.1 resolves `.*` to
`__consumer_offsets` too.

When regexes are resolved again follows Kafka's GroupMetadataManager: never twice within 10 s;
then when a subscribed regex has no resolution yet, when topics were created since the last
resolution, or when the last one is older than group.consumer.regex.refresh.interval.ms.
Deleted topics need no new resolution: they leave the assignment through the metadata hash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import re2

from kgroups.coordinator.consumer_group import ResolvedRegex

# Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: regexes are resolved at most once per 10 s.
REFRESH_MIN_INTERVAL_MS = 10_000

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad regex is its error, not the broker's stderr

# RE2's error texts and the descriptions RE2/J (Kafka's engine) gives the same errors.
_RE2J_DESCRIPTIONS = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "regexp/syntax: internal error",  # RE2/J's words for an unmatched )
    "bad repetition operator": "invalid nested repetition operator",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "trailing \\": "trailing backslash at end of expression",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}


class InvalidRegexError(ValueError):
    """The regex does not compile; `description` is RE2/J's wording of why."""

    def __init__(self, regex: str, description: str) -> None:
        super().__init__(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: "
                         f"{description}.")
        self.description = description


def compile_regex(regex: str) -> re2._Regexp:
    try:
        pattern = re2.compile(regex, _OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        code = text.split(": ", 1)[0]
        raise InvalidRegexError(regex, _RE2J_DESCRIPTIONS.get(code, code)) from None
    if _has_any_byte_escape(regex):
        # RE2's \C (any byte) has no RE2/J counterpart: Kafka refuses it.
        raise InvalidRegexError(regex, "invalid escape sequence")
    return pattern


def _has_any_byte_escape(regex: str) -> bool:
    """Whether `regex` uses \\C outside a \\Q...\\E literal."""
    index = 0
    while index < len(regex):
        if regex.startswith("\\Q", index):
            end = regex.find("\\E", index + 2)
            if end < 0:
                return False
            index = end + 2
        elif regex[index] == "\\":
            if regex[index + 1 : index + 2] == "C":
                return True
            index += 2
        else:
            index += 1
    return False


def resolve(regexes: Iterable[str], topic_names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Each regex and the topics whose whole name it matches (a regex that no longer compiles,
    which validation makes impossible, matches nothing, as Kafka ignores it)."""
    names = tuple(topic_names)
    resolved: dict[str, frozenset[str]] = {}
    for regex in regexes:
        try:
            pattern = compile_regex(regex)
        except InvalidRegexError:
            resolved[regex] = frozenset()
            continue
        resolved[regex] = frozenset(n for n in names if pattern.fullmatch(n) is not None)
    return resolved


def refresh_due(
    subscribed: Mapping[str, int],
    resolved: Mapping[str, ResolvedRegex],
    now: int,
    topics_created_version: int,
    refresh_interval_ms: int,
    requested: bool,
) -> bool:
    """Whether the group's regexes are resolved again now (Kafka's conditions, in its order).
    `requested`: a member just subscribed with a regex no member used before."""
    if not subscribed:
        return False
    last = next(iter(resolved.values()), None)
    last_time = last.timestamp if last is not None else None
    if last_time is not None and now <= last_time + REFRESH_MIN_INTERVAL_MS:
        return False
    last_version = last.version if last is not None else 0
    return (requested or len(subscribed) != len(resolved)
            or last_version < topics_created_version
            or (last_time is not None and now > last_time + refresh_interval_ms))
