"""A throwaway PostgreSQL server for tests: initdb in a fresh directory, listening on a free
127.0.0.1 port only, trust authentication, stopped and deleted afterwards.

PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user (which
Debian's package creates), in a directory that user owns."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

STARTUP_TIMEOUT_S = 60.0


def _binary(name: str) -> str:
    """Debian keeps PostgreSQL's programs in /usr/lib/postgresql/<version>/bin, off the PATH."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (make system-deps installs it)")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    directory: Path
    port: int
    user: str | None  # the account the server runs as, when not the current one
    fsync: bool = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=120)

    @classmethod
    def start(cls, fsync: bool = False) -> PostgresServer:
        """Without fsync by default (a test's data dies with it); a benchmark asks for it, so
        a commit costs what a durable one costs."""
        directory = Path(tempfile.mkdtemp(prefix="kgroups-pg-"))
        user = "postgres" if os.geteuid() == 0 else None
        if user is not None:
            account = pwd.getpwnam(user)
            os.chown(directory, account.pw_uid, account.pw_gid)
        server = cls(directory, _free_port(), user, fsync)
        data = str(directory / "data")
        server._run(_binary("initdb"), "-D", data, "-U", "postgres", "--auth=trust",
                    "--no-sync", "-E", "UTF8")
        server.resume()
        return server

    def resume(self) -> None:
        """Start the server (again, after `halt`), on the same port with the same data."""
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.directory} "
                   f"-c fsync={'on' if self.fsync else 'off'}")
        self._run(_binary("pg_ctl"), "-D", str(self.directory / "data"), "-o", options, "-l",
                  str(self.directory / "server.log"), "-w", "-t", str(int(STARTUP_TIMEOUT_S)),
                  "start")
        self._wait_ready()

    def halt(self) -> None:
        """Stop the server at once, as a crash would (every session cut, committed data
        kept), leaving its data for `resume`."""
        self._run(_binary("pg_ctl"), "-D", str(self.directory / "data"), "-m", "immediate",
                  "stop")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"PostgreSQL did not listen on {self.port}")

    def stop(self) -> None:
        try:
            self.halt()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
