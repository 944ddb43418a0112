"""The one way tests serve HTTP: an aiohttp app on free ports of loopback, shut down at once.

Every test server (``tests/servers/*``, the ad-hoc sites of test modules) starts its app with
:func:`start_app` (or :func:`serve`, or the ``http_server`` fixture). Their runners cancel a handler
whose client went away (``handler_cancellation``) and, at cleanup, give a handler still running
:data:`SHUTDOWN_TIMEOUT` seconds before cancelling it -- aiohttp's default is 60 s, which a test whose
pages hang by design (a worker holding its jobs, a stalled download) spent in every teardown.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import pytest
from aiohttp import web

__all__ = ["SHUTDOWN_TIMEOUT", "Served", "StartApp", "http_server", "serve", "start_app"]

#: Seconds a handler still running at cleanup gets before it is cancelled.
SHUTDOWN_TIMEOUT = 0.25


@dataclass
class Served:
    """An app being served: its ``ports`` (one per site, in the order asked for) and ``host``."""

    runner: web.AppRunner
    host: str
    ports: list[int] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.ports[0]

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def urls(self) -> list[str]:
        return [f"http://{self.host}:{p}" for p in self.ports]

    async def close(self) -> None:
        """Stop serving (handlers still running are cancelled after :data:`SHUTDOWN_TIMEOUT`)."""
        await self.runner.cleanup()


async def start_app(
    app: web.Application, *, sites: int = 1, host: str = "127.0.0.1", hosts: Sequence[str] = (), port: int = 0
) -> Served:
    """Serve ``app`` on ``sites`` free ports of ``host`` -- or on ``port`` of each of ``hosts`` (``port`` 0:
    a free one each); :meth:`Served.close` it."""
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    served = Served(runner, hosts[0] if hosts else host)
    try:
        for addr in hosts or [host] * sites:
            site = web.TCPSite(runner, addr, port)
            await site.start()
            server = site._server
            assert server is not None
            served.ports.append(int(server.sockets[0].getsockname()[1]))  # type: ignore[attr-defined]
    except BaseException:
        await runner.cleanup()
        raise
    return served


@contextlib.asynccontextmanager
async def serve(app: web.Application, **options: object) -> AsyncIterator[Served]:
    """:func:`start_app` for the block."""
    served = await start_app(app, **options)  # type: ignore[arg-type]
    try:
        yield served
    finally:
        await served.close()


StartApp = Callable[..., Awaitable[Served]]


@pytest.fixture
async def http_server() -> AsyncIterator[StartApp]:
    """``await http_server(app, **options)`` -> :class:`Served` (see :func:`start_app`), closed after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(app: web.Application, **options: object) -> Served:
            return await stack.enter_async_context(serve(app, **options))

        yield start
