"""Kafka's own broker settings (names, types, validators), read from a data file dumped from
Kafka 4.3.1 (kafka_broker_configs.tsv says how).

A Kafka `server.properties` carries many settings kgroups has no use for (listeners, log.dirs,
process.roles...). Knowing Kafka's list lets `kgroups serve` tell such a setting (ignored, said
once) from a typo (warned with the closest known name, as Kafka warns "supplied but isn't a
known config"), and check a supplied value with the type and range Kafka would apply, so a
value Kafka refuses at start-up is refused here too instead of misbehaving later.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

_DATA_FILE = "kafka_broker_configs.tsv"
_INT_BOUNDS = {"SHORT": 2**15, "INT": 2**31, "LONG": 2**63}
_RANGE = re.compile(r"^\[(?P<low>[^,\]]*),\.\.\.(?:,(?P<high>[^\]]+))?\](?P<or_minus_one> or -1)?$")
_CHOICES = re.compile(r"^(?P<any_case>\(case insensitive\) )?\[(?P<items>[^\]]*)\]$")
# Where a Kafka setting has a kgroups counterpart, the warning says which.
_COUNTERPARTS = {
    "listeners": "kgroups serve listens on --host/--port",
    "log.dirs": "kgroups serve keeps its data in --data-dir",
    "log.dir": "kgroups serve keeps its data in --data-dir",
}


@dataclass(frozen=True, slots=True)
class KafkaSetting:
    name: str
    type: str  # Kafka's ConfigDef.Type: INT, LONG, BOOLEAN, STRING, LIST, ...
    validator: str  # as Kafka prints it, e.g. "[1,...]" or "[compact, delete]"; "" for none

    def check(self, raw: str, *, with_range: bool = True) -> str | None:
        """Why Kafka would refuse `raw` for this setting, or None when it would accept it;
        without `with_range`, only its type is checked."""
        text = raw.strip()
        if self.type in _INT_BOUNDS:
            bound = _INT_BOUNDS[self.type]
            try:
                number: float = int(text)
            except ValueError:
                return f"expected an integer ({self.type.lower()}), got {raw!r}"
            if not -bound <= number < bound:
                return f"{raw} does not fit Kafka's {self.type.lower()}"
            if not with_range:
                return None
        elif self.type == "DOUBLE":
            try:
                number = float(text)
            except ValueError:
                return f"expected a number, got {raw!r}"
            if not with_range:
                return None
        elif self.type == "BOOLEAN":
            if text.lower() not in ("true", "false"):
                return f"expected true or false, got {raw!r}"
            return None
        else:
            return self._check_text(text)
        return self._check_range(number)

    def _check_range(self, number: float) -> str | None:
        match = _RANGE.match(self.validator)
        if match is None:
            return None
        if match["or_minus_one"] and number == -1:
            return None
        low, high = float(match["low"]), match["high"]
        if number < low:
            return f"must be at least {match['low']}, got {_plain(number)}"
        if high is not None and number > float(high):
            return f"must be at most {high}, got {_plain(number)}"
        return None

    def _check_text(self, text: str) -> str | None:
        if self.validator.startswith("non-empty") and not text:
            return "must not be empty"
        match = _CHOICES.match(self.validator)
        if match is None:
            return None
        choices = [item.strip() for item in match["items"].split(",")]
        values = [item.strip() for item in text.split(",")] if self.type == "LIST" else [text]
        fold = str.lower if match["any_case"] else str
        allowed = {fold(choice) for choice in choices}
        wrong = [value for value in values if fold(value) not in allowed]
        if wrong:
            return f"{', '.join(map(repr, wrong))} is not one of {', '.join(choices)}"
        return None


def _plain(number: float) -> str:
    return str(int(number)) if number == int(number) else str(number)


@cache
def kafka_settings() -> dict[str, KafkaSetting]:
    """Every broker setting Kafka 4.3.1 defines, by name."""
    text = resources.files(__package__).joinpath(_DATA_FILE).read_text(encoding="utf-8")
    settings: dict[str, KafkaSetting] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, kind, validator = line.split("\t")
        settings[name] = KafkaSetting(name, kind, validator)
    return settings


def unknown_setting_warning(key: str, kgroups_names: frozenset[str]) -> str:
    """What to tell an operator about a setting kgroups does not read: a Kafka setting kgroups
    has no use for, or (not a Kafka name either) most likely a typo of the closest known one."""
    if key in kafka_settings():
        counterpart = _COUNTERPARTS.get(key)
        hint = f" ({counterpart})" if counterpart else ""
        return f"'{key}' is a Kafka broker setting kgroups does not use; ignored{hint}"
    message = f"The configuration '{key}' was supplied but isn't a known config."
    close = difflib.get_close_matches(key, sorted(kgroups_names | set(kafka_settings())), n=1)
    if close:
        message += f" Did you mean '{close[0]}'?"
    return message
