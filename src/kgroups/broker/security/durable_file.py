"""A single node's security files (ACLs, SCRAM credentials) are replaced whole and atomically:
written to a side file, synced, renamed over the old one, the directory synced; a crash leaves
either the old or the new content, never a torn one."""

from __future__ import annotations

import os
from pathlib import Path


def replace_durably(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
