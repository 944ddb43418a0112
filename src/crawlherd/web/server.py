"""Serving the console with uvicorn, inside the caller's event loop (``crawlherd web``, ``run``, ``demo``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._resilience import OutageLog
from crawlherd.console.sessions import SessionPolicy
from crawlherd.console.users import count_users
from crawlherd.db.heartbeat import Heartbeat
from crawlherd.web.app import create_app
from crawlherd.web.auth import check_bind

__all__ = ["Console", "serve_console"]

log = logging.getLogger(__name__)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside a crawlherd command: the command's own handlers take SIGINT and SIGTERM (one
    drains, a second aborts) and stop the console when they stop the rest. uvicorn's own capture would
    replace them while the console runs and raise the signal again after its shutdown -- one Ctrl+C on
    ``crawlherd run`` then stopped the console, then aborted the jobs in flight as if pressed twice."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Console:
    """A running console: ``url`` once started."""

    def __init__(self, server: uvicorn.Server, host: str, port: int) -> None:
        self.server = server
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"


@contextlib.asynccontextmanager
async def serve_console(
    engine: AsyncEngine,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    heartbeat: bool = True,
    session_policy: SessionPolicy | None = None,
) -> AsyncIterator[Console]:
    """Serve the console on ``host:port`` (``port`` 0: a free one) until the block exits. Refuses a
    non-loopback ``host`` while no user is defined. ``session_policy``: see :func:`create_app`."""
    check_bind(host, await count_users(engine))
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # Listen at once: a socket only bound does not hold the port against another SO_REUSEADDR bind
        # (two processes would both "get" 8080 and one would fail later, inside the server).
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    app = create_app(engine, session_policy=session_policy)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="console")
    url = f"http://{host}:{bound}/"
    outages = OutageLog(log, f"console {url}")  # a failed beat: a "config DB" outage, said once
    beat = Heartbeat(engine, kind="web", info={"url": url}, outages=outages) if heartbeat else None
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        if beat is not None:
            await beat.__aenter__()
        yield Console(server, host, bound)
    finally:
        if beat is not None:
            await beat.__aexit__(None, None, None)
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
