"""Structured one-line event logging for the broker: `event key=value ...`, quiet by default.

Operators grep for events (a connection closed for bad input, a rebalance completed), so each
notable thing is one line with a stable event name and key=value fields, not prose.

Much of what is logged comes from clients (group and member ids, client ids, SASL user names),
and a client may put a newline, a NUL or a terminal escape in any of them. Every such character
is written as a Python-style escape (`\\n`, `\\x1b`), so one event is one line and what a log
viewer shows is what was sent: no client can forge a line or recolour a terminal.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

LOGGER_NAME = "kgroups"


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                  "%Y-%m-%dT%H:%M:%S")
    handler.setFormatter(formatter)
    handler.addFilter(_OneLinePerRecord(formatter))
    root = logging.getLogger(LOGGER_NAME)
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def escape_unprintable(text: str) -> str:
    """`text` with every character `str.isprintable` refuses (other than a plain space) written
    as its escape: control characters, line and paragraph separators, unassigned code points."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{code:02x}")
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _format_value(value: Any) -> str:
    text = str(value)
    if not text or any(ch.isspace() or ch in '"=\\' or not ch.isprintable() for ch in text):
        quoted = text.replace("\\", "\\\\").replace('"', '\\"')
        return '"' + escape_unprintable(quoted) + '"'
    return text


class _OneLinePerRecord(logging.Filter):
    """Escapes what a record's message and traceback carry, on the handler kgroups installs, so
    log lines that do not go through `log_event` (a handler's crash, a storage error quoting a
    client's input) cannot forge a line either: the message is escaped whole, and a traceback
    keeps its line breaks but indents every line of it, so none can pass
    for a record of its own."""

    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self._formatter = formatter

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = escape_unprintable(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            lines = self._formatter.formatException(record.exc_info).split("\n")
            record.exc_text = "".join("\n\t" + escape_unprintable(line) for line in lines)[1:]
        return True


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    """Emit `event k=v ...` at `level`; values with spaces, quotes or unprintable characters
    are quoted, the unprintable ones escaped."""
    if logger.isEnabledFor(level):
        parts = [event, *(f"{key}={_format_value(value)}" for key, value in fields.items())]
        logger.log(level, " ".join(parts))
