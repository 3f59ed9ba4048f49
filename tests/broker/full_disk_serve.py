"""`kgroups serve` on a disk that is full while a flag file exists (for runs without root).

Usage: python full_disk_serve.py FLAG_FILE serve --data-dir DIR ...

Without root a test cannot mount a small tmpfs, so this wraps os.write as a full file system
behaves: while FLAG_FILE exists, a write into DIR first lands half its bytes (the short write a
file system makes with a little space left) and the next one fails with ENOSPC.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path


def install(flag: Path, data_dir: Path) -> None:
    real_write = os.write
    short_written: set[int] = set()
    inside = str(data_dir.resolve()) + os.sep

    def write(fd: int, data: bytes) -> int:
        if not flag.exists():
            return real_write(fd, data)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(inside):
            return real_write(fd, data)
        if fd in short_written or len(data) < 2:
            short_written.discard(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        short_written.add(fd)
        return real_write(fd, bytes(memoryview(data)[: len(data) // 2]))

    os.write = write


def main() -> int:
    flag, argv = Path(sys.argv[1]), sys.argv[2:]
    install(flag, Path(argv[argv.index("--data-dir") + 1]))
    from kgroups.cli import main as kgroups_main

    return kgroups_main(argv)


if __name__ == "__main__":
    sys.exit(main())
