"""A PRIVATE PostgreSQL cluster for fault tests: ``initdb`` + ``pg_ctl`` on its own port and data
directory (never the machine's shared server), killed by its postmaster's PID and started again.

As root, the cluster runs as the ``postgres`` user (``runuser``), in a directory that user owns.
``initdb`` runs once per test process, into a template directory each cluster's data is copied from.
"""

from __future__ import annotations

import atexit
import functools
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests._netutil import free_port
from tests.support.services import missing


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        missing(f"PostgreSQL's {name} is not installed (for a private PostgreSQL)")
    return found[-1]


def _as_owner() -> list[str]:
    """The prefix that runs a command as the cluster's owner: ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        missing("runuser is not installed (running as root, for a private PostgreSQL)")
    return ["runuser", "-u", "postgres", "--"]


def _owned_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


@functools.cache
def _template() -> Path:
    """A fresh ``initdb`` data directory, made once per process (removed at its exit)."""
    root = _owned_dir("crawlherd-pg-template-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    subprocess.run([*_as_owner(), _bin("initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return root / "data"


class PrivatePostgres:
    def __init__(self) -> None:
        self.port = free_port()
        self._as = _as_owner()
        self.root = _owned_dir("crawlherd-pg-")
        self.data = self.root / "data"
        self._run(["cp", "-a", str(_template()), str(self.data)])

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
