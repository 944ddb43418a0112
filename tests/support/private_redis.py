"""A PRIVATE ``redis-server`` for fault tests: the test's own port and directory, AOF with
``appendfsync always`` (a restart keeps every write Redis acknowledged), killed with SIGKILL by its
PID and started again on the same port and directory. Never the machine's shared Redis."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from tests._netutil import free_port
from tests.support.services import require_tool

__all__ = ["PrivateRedis", "private_redis_server"]


class PrivateRedis:
    """``persistent=False``: no AOF either (``--appendonly no``), as many caches run -- a restart
    comes back empty."""

    def __init__(self, directory: Path, *, persistent: bool = True) -> None:
        self.port = free_port()
        self.dir = directory
        self.persistent = persistent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it (again) and wait until it answers PING (the AOF loaded)."""
        exe = require_tool("redis-server", "for a private Redis")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             *(["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]),
             "--dir", str(self.dir), "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    if client.ping():
                        return
                except redis.RedisError:  # not listening yet, or loading its AOF
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"private redis-server exited with {self.proc.returncode}") from None
                    time.sleep(0.05)
            raise RuntimeError("private redis-server did not start")
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL it by its PID (a crash, not a shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None


def private_redis_server(directory: Path) -> Iterator[PrivateRedis]:
    """The body of a ``private_redis`` fixture: started in ``directory``, killed afterwards."""
    server = PrivateRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.kill()
