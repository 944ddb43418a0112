"""The ``crawlherd`` command. Subcommands live one per module and are imported only when used."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
from typing import Any

import click

from crawlherd.errors import CrawlherdError

__all__ = ["entry", "main"]

# name -> "module:attribute"; imported lazily so ``crawlherd --help`` stays fast.
COMMANDS: dict[str, str] = {
    "crawl": "crawlherd.cli.crawl:crawl",
    "frontier": "crawlherd.cli.frontier:frontier",
    "db": "crawlherd.cli.db:db",
    "targets": "crawlherd.cli.targets:targets",
    "dispatch": "crawlherd.cli.dispatch:dispatch",
    "worker": "crawlherd.cli.worker:worker",
    "run": "crawlherd.cli.run:run",
    "demo": "crawlherd.cli.demo:demo",
    "jobs": "crawlherd.cli.jobs:jobs",
    "items": "crawlherd.cli.items:items",
    "explain": "crawlherd.cli.explain:explain_cmd",
    "users": "crawlherd.cli.users:users",
    "web": "crawlherd.cli.web:web",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use; missing modules are simply not listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._load(name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command: click.Command = getattr(module, attr)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CrawlherdError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(2)


def _cancelled_pool_reset(record: logging.LogRecord) -> bool:
    """SQLAlchemy's pool logs a traceback (ERROR) when the task returning a connection is cancelled
    during its rollback -- what aborting a process's jobs at shutdown does. The connection is dropped
    and the database rolls the transaction back: said in one line instead."""
    if record.name.startswith("sqlalchemy.pool") and record.exc_info and isinstance(
        record.exc_info[1], asyncio.CancelledError
    ):
        record.msg, record.args, record.exc_info, record.exc_text = (
            "a database connection was dropped while its task was cancelled (the database rolls its "
            "transaction back)", (), None, None)
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger().isEnabledFor(logging.INFO)
    return True


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Settings file (default: ./crawlherd.toml when it exists).",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None,
              help="Log lines as text or one JSON object each (time, level, logger, message).  "
              "[default: setting log_format, text]")
@click.option("--as", "user", default=None, metavar="USER", envvar="CRAWLHERD_USER",
              help="Act as console user USER, with their role (viewer, operator, admin), audited under their "
              "name (env CRAWLHERD_USER).  [default: the shell, an admin, audited as cli]")
@click.version_option(package_name="crawlherd")
@click.pass_context
def main(ctx: click.Context, config_file: str | None, verbose: int, log_format: str | None,
         user: str | None) -> None:
    """crawlherd keeps many crawlers fed, polite and accountable.

    \b
    Try it:   crawlherd demo                 the whole pipeline against a built-in local site
    Crawl:    crawlherd crawl https://example.com --max-pages 50
    Pipeline: crawlherd db upgrade; crawlherd targets import targets.toml; crawlherd run

    Settings come from defaults < crawlherd.toml < CRAWLHERD_* environment < flags.
    The commands that read or change the console's model (targets, jobs, items, explain, users) act
    as the shell (an admin) unless --as USER says which console user acts.
    """
    import os

    from crawlherd.settings import load_settings, warn_unknown_variables

    warn_unknown_variables(os.environ, lambda message: click.secho(f"warning: {message}", fg="yellow", err=True))
    settings = load_settings(config_file, log_format=log_format)
    configured = logging.getLevelName(settings.log_level)
    level = min(configured, logging.WARNING - 10 * verbose) if verbose else configured
    handler = logging.StreamHandler()
    if settings.log_format == "json":
        from crawlherd.cli._common import JsonLogFormatter

        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_cancelled_pool_reset)
    logging.basicConfig(level=max(level, logging.DEBUG), handlers=[handler])
    # The AMQP client logs every failed reconnect (ERROR) and every lost connection (a WARNING with a
    # traceback) itself; crawlherd's broker says an outage once (lost / back after N s). Their own
    # lines only at -vv.
    for chatty in ("aiormq", "aio_pika"):
        logging.getLogger(chatty).setLevel(logging.DEBUG if level <= logging.DEBUG else logging.CRITICAL)
    ctx.ensure_object(dict)
    ctx.obj["config_file"] = config_file
    ctx.obj["user"] = user


def entry() -> None:
    """The ``crawlherd`` console script and ``python -m crawlherd``: :func:`main`, in a process of its own
    (its garbage collector tuned for a long-running service; see :mod:`crawlherd.cli._loop`)."""
    from crawlherd.cli._loop import own_the_process

    own_the_process()
    main()
