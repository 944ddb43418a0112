"""Helpers of the console's commands: ``--metrics-port``, the console of ``run``, and running one
coroutine on the config DB."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.cli._common import config_db, settings_from

__all__ = ["console_options", "console_or_none", "metrics_port_option", "on_db", "start_metrics"]

T = TypeVar("T")

metrics_port_option = click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    envvar="CRAWLHERD_METRICS_PORT",
    help="Serve Prometheus metrics on this port (127.0.0.1:PORT/metrics; env CRAWLHERD_METRICS_PORT).",
)


def console_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--console-port`` and ``--no-console`` of the commands that serve the console beside their work
    (``run``, ``demo``); ``--web-port`` and ``--no-web`` are their former names."""
    f = click.option(
        "--no-console", "--no-web", "no_console", is_flag=True,
        help="Do not serve the console.",
    )(f)
    return click.option(
        "--console-port", "--web-port", "console_port", type=click.IntRange(0, 65535), default=8080,
        show_default=True, envvar="CRAWLHERD_WEB_PORT", metavar="PORT",
        help="Serve the console (the web UI) on http://127.0.0.1:PORT/ -- a free port if that one is taken, "
        "0 for any free port (env CRAWLHERD_WEB_PORT).",
    )(f)


def start_metrics(port: int | None, host: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` when ``port`` is given, and say where."""
    if port is None:
        return
    from crawlherd.metrics import serve_metrics

    bound = serve_metrics(port, host)
    click.echo(f"metrics: http://{host}:{bound}/metrics", err=True)


def on_db(
    ctx: click.Context, database_url: str | None, work: Callable[[AsyncEngine], Awaitable[T]], *,
    read_only: bool = False, migrate: bool = True,
) -> T:
    """Run ``work`` on the config DB of the settings (its tables created when it is new, unless not
    ``migrate``); ``read_only`` commands refuse a SQLite path that does not exist."""
    settings = settings_from(ctx, database_url=database_url)

    async def main() -> T:
        async with config_db(settings, read_only=read_only, migrate=migrate) as engine:
            return await work(engine)

    return asyncio.run(main())


@contextlib.asynccontextmanager
async def console_or_none(engine: AsyncEngine, port: int, *, enabled: bool = True) -> AsyncIterator[Any]:
    """The console on 127.0.0.1:``port`` (or a free port when that one is taken) for ``run`` and
    ``demo``; None when not ``enabled``."""
    if not enabled:
        yield None
        return
    from crawlherd.web.server import serve_console

    try:
        cm = serve_console(engine, port=port)
        console = await cm.__aenter__()
    except OSError:
        click.echo(f"port {port} is taken: serving the console on a free port", err=True)
        cm = serve_console(engine, port=0)
        console = await cm.__aenter__()
    try:
        yield console
    finally:
        await cm.__aexit__(None, None, None)
