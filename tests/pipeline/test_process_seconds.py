"""`kgroups analyze` reports the time from its process's start: the clock it reads."""

from __future__ import annotations

import subprocess
import sys
import time

PROGRAM = """
import time
from kgroups.pipeline.cli import process_seconds
time.sleep(0.3)
print(process_seconds())
"""


def test_process_seconds_count_from_the_process_start_imports_included():
    started = time.monotonic()
    printed = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    waited = time.monotonic() - started
    seconds = float(printed)
    # Above the sleep by the interpreter's start and the imports; never above the parent's
    # measure (give or take one clock tick of the kernel's start time).
    assert 0.3 < seconds <= waited + 0.02
    assert seconds > waited - 0.5
