"""A PRIVATE PostgreSQL cluster for fault tests: ``initdb`` + ``pg_ctl`` on its own port and data
directory (never the machine's shared server), killed by its postmaster's PID and started again.

As root, the cluster runs as the ``postgres`` user (``runuser``), in a directory that user owns.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests._netutil import free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        pytest.skip(f"PostgreSQL's {name} is not installed")
    return found[-1]


class PrivatePostgres:
    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="crawlherd-pg-"))
        self.data = self.root / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                pytest.skip("running as root without runuser: cannot start a private PostgreSQL")
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres", "postgres")
        self._run([_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"])

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str]) -> None:
        subprocess.run([*self._as, *argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._run([_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w",
                   "-t", "30", "start"])

    def pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster by its PID (its backends exit when they see it gone)."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        time.sleep(0.5)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
