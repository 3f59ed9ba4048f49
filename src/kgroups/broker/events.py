"""Structured one-line event logging for the broker: `event key=value ...`, quiet by default.

Operators grep for events (a connection closed for bad input, a rebalance completed), so each
notable thing is one line with a stable event name and key=value fields, not prose.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

LOGGER_NAME = "kgroups"


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    root = logging.getLogger(LOGGER_NAME)
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def _format_value(value: Any) -> str:
    text = str(value)
    if not text or any(ch.isspace() or ch in '"=' for ch in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    """Emit `event k=v ...` at `level`; values with spaces or quotes are quoted."""
    if logger.isEnabledFor(level):
        parts = [event, *(f"{key}={_format_value(value)}" for key, value in fields.items())]
        logger.log(level, " ".join(parts))
