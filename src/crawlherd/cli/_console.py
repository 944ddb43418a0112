"""Helpers of the console's commands: ``--metrics-port``, the console of ``run``, running one
coroutine on the config DB, and who acts (``crawlherd --as USER``).

Who acts on the command line: with ``--as USER`` (or ``CRAWLHERD_USER``), that console user, with
their role -- checked against the same table as the console's routes
(:class:`~crawlherd.console.users.Action`) -- and audited under their name; an unknown name is
refused. Without it, the shell: an admin, audited as ``cli`` (whoever holds the config DB's
credentials can change anything anyway; ``--as`` is the guard rail for operators who should not)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.cli._common import config_db, settings_from
from crawlherd.errors import CrawlherdError

if TYPE_CHECKING:  # the console's users are imported when a command acts as one (not by the services)
    from crawlherd.console.users import Action

__all__ = [
    "CLI_ACTOR", "acting_as", "check_actor", "console_options", "console_or_none", "metrics_port_option", "on_db",
    "start_metrics",
]

#: Who the audit trail says acted when a command is run without ``--as`` (the shell, an admin).
CLI_ACTOR = "cli"

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


def acting_as(ctx: click.Context) -> str:
    """The name the command acts (and is audited) under: ``--as USER``, else :data:`CLI_ACTOR`."""
    user = (ctx.find_root().obj or {}).get("user")
    return user if isinstance(user, str) and user else CLI_ACTOR


async def check_actor(ctx: click.Context, engine: AsyncEngine, action: Action) -> str:
    """Refuse (:class:`~crawlherd.console.users.Forbidden`) unless whoever acts may do ``action``; their
    name. Without ``--as``: the shell, an admin."""
    name = acting_as(ctx)
    if not (ctx.find_root().obj or {}).get("user"):
        return name
    from crawlherd.console.users import require, user_role

    role = await user_role(engine, name)
    if role is None:
        raise CrawlherdError(f"--as {name}: no console user of that name (see `crawlherd users list`)")
    require(role, action)
    return name


def on_db(
    ctx: click.Context, database_url: str | None, work: Callable[[AsyncEngine], Awaitable[T]], *,
    action: Action | None, read_only: bool = False, migrate: bool = True,
) -> T:
    """Run ``work`` on the config DB of the settings (its tables created when it is new, unless not
    ``migrate``), once whoever acts may do ``action`` (:func:`check_actor`; None: a command that does
    not act through the console, as ``db upgrade``); ``read_only`` commands refuse a SQLite path that
    does not exist."""
    settings = settings_from(ctx, database_url=database_url)

    async def main() -> T:
        async with config_db(settings, read_only=read_only, migrate=migrate) as engine:
            if action is not None:
                await check_actor(ctx, engine, action)
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
