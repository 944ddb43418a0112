"""Options and helpers shared by the commands that open the config DB."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._resilience import OutageLog, backoff_delay
from crawlherd.brokers import Broker, open_broker
from crawlherd.db import create_engine, current_revision, head_revision, upgrade
from crawlherd.errors import BackendUnavailableError, CrawlherdError
from crawlherd.settings import Settings, load_settings

__all__ = [
    "broker_for_service",
    "JsonLogFormatter",
    "Output",
    "Rates",
    "broker_option",
    "config_db",
    "database_option",
    "ensure_migrated",
    "output_options",
    "periodic_status",
    "settings_from",
    "stats_dump",
]

F = TypeVar("F", bound=Callable[..., Any])

database_option = click.option(
    "--database-url",
    default=None,
    metavar="URL",
    help="Config DB (sqlite:///file.db or postgresql://...); default: CRAWLHERD_DATABASE_URL.",
)

broker_option = click.option(
    "--broker-url",
    default=None,
    metavar="URL",
    help="Message broker (redis://, redis+cluster://, amqp://, sqs://, sqlite:///); default: CRAWLHERD_BROKER_URL, "
    "else a table in a SQLite config DB.",
)


def settings_from(ctx: click.Context, **overrides: Any) -> Settings:
    """The settings: defaults < crawlherd.toml < environment < these flags."""
    obj = ctx.find_root().obj or {}
    return load_settings(obj.get("config_file"), **overrides)


async def ensure_migrated(engine: AsyncEngine, *, create: bool = True) -> None:
    """Create the tables of a fresh (empty) config DB when ``create``, else refuse it; refuse to work
    on one at an older migration (upgrading an existing database is the operator's decision:
    `crawlherd db upgrade`)."""
    current, head = await current_revision(engine), head_revision()
    if current is None and not await _has_tables(engine):
        if not create:
            raise CrawlherdError(
                "the config DB has no tables yet: run `crawlherd db upgrade` first (with the same "
                "--database-url), then `crawlherd targets import`"
            )
        click.echo("new config DB: creating its tables", err=True)
        await upgrade(engine)
        return
    if current != head:
        raise CrawlherdError(
            f"the config DB is at migration {current or '(none)'}, this crawlherd needs {head}: "
            "run `crawlherd db upgrade` first"
        )


async def _migrated_once_up(engine: AsyncEngine, *, create: bool, out: Output, every: float) -> None:
    """:func:`ensure_migrated`, waiting for a config DB that does not answer: said once (a warning),
    then a status line per try (at most ``every`` seconds apart) until it answers (an info line)."""
    outages = OutageLog(logging.getLogger("crawlherd.cli"), "start-up")
    failures = 0
    while True:
        try:
            await ensure_migrated(engine, create=create)
        except BackendUnavailableError as exc:
            outages.down("database", exc)
            failures += 1
            out.status(f"{time.strftime('%H:%M:%S')} waiting for the config DB: {outages.describe()}")
            await asyncio.sleep(backoff_delay(failures, cap=every))
            continue
        outages.up("database")
        out.end_live()
        return


async def _has_tables(engine: AsyncEngine) -> bool:
    from sqlalchemy import inspect

    async with engine.connect() as conn:
        names = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
    return any(not name.startswith("broker_") for name in names)


def engine_for(settings: Settings, *, read_only: bool = False, **options: Any) -> AsyncEngine:
    """An engine for ``settings.database_url``. ``read_only`` commands refuse a SQLite path that does
    not exist (a typo must not create an empty database)."""
    return create_engine(settings.database_url, must_exist=read_only, **options)


@contextlib.asynccontextmanager
async def config_db(
    settings: Settings,
    *,
    read_only: bool = False,
    migrate: bool = True,
    create: bool = True,
    pool_size: int | None = None,
    waiting: Output | None = None,
) -> AsyncIterator[AsyncEngine]:
    """The config DB of ``settings``, checked to be at the newest migration (``migrate``) -- its tables
    created when it is new, unless ``create`` is False (the long-running services, ``worker`` and
    ``dispatch``, refuse an empty database: its set-up is ``crawlherd db upgrade``) --, disposed of at
    the end; ``read_only`` and ``pool_size`` as :func:`engine_for`. With ``waiting`` (a service's
    output), a config DB that cannot be reached is waited for: said at once, and on a status line
    every ``status_interval`` seconds until it answers."""
    engine = engine_for(settings, read_only=read_only, **({} if pool_size is None else {"pool_size": pool_size}))
    try:
        if migrate and waiting is not None:
            await _migrated_once_up(engine, create=create, out=waiting, every=settings.status_interval)
        elif migrate:
            await ensure_migrated(engine, create=create)
        yield engine
    finally:
        await engine.dispose()


def _json_default(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else str(value)


class JsonLogFormatter(logging.Formatter):
    """``--log-format json``: one JSON object per log line (time in UTC, level, logger, message, and the
    exception text when there is one), for journald, Docker or a log collector."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def output_options(func: F) -> F:
    """``-q/--quiet`` and ``--json`` for a command that prints data; the command receives ``quiet``
    and ``as_json`` and builds an :class:`Output` from them."""
    func = click.option("--json", "as_json", is_flag=True,
                        help="Print the result as JSON on standard output (progress and logs go to stderr).")(func)
    return click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors (and --json's result).")(func)


class Output:
    """Where a command's words go: ``info`` (progress, banners: stderr, silenced by ``-q`` and by
    ``--json``), ``result`` (the data: a human line on stdout, or with ``--json`` one JSON document),
    ``status`` (periodic lines; live, overwritten in place, only on a terminal)."""

    def __init__(self, *, quiet: bool = False, as_json: bool = False, tty: bool | None = None) -> None:
        self.quiet = quiet
        self.as_json = as_json
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._live = False

    def info(self, message: str) -> None:
        """A line for the person watching (stderr); none with -q or --json."""
        if not (self.quiet or self.as_json):
            self._end_live()
            click.echo(message, err=True)

    def status(self, message: str) -> None:
        """A periodic status line: redrawn in place on a terminal, a plain line otherwise."""
        if self.quiet or self.as_json:
            return
        if self.tty:
            click.echo(f"\r{message}\x1b[K", nl=False, err=True)
            self._live = True
        else:
            click.echo(message, err=True)

    def result(self, text: str, data: Mapping[str, Any] | list[Any]) -> None:
        """The command's result: ``data`` as JSON with --json, else ``text`` (silenced by -q)."""
        self._end_live()
        if self.as_json:
            click.echo(json.dumps(data, ensure_ascii=False, default=_json_default, indent=2))
        elif text and not self.quiet:
            click.echo(text)

    def end_live(self) -> None:
        """End a live status line (so that the next line starts on its own)."""
        self._end_live()

    def _end_live(self) -> None:
        if self._live:
            click.echo("", err=True)
            self._live = False


class Rates:
    """Per-minute rates of growing counters (pages, items) since the start, for the status lines:
    Crawlee's periodic statistics, in pages/min and items/min. ``clock`` is injectable."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        import time

        self._clock = clock or time.monotonic
        self.started = self._clock()

    @property
    def elapsed(self) -> float:
        """Seconds since the start."""
        return self._clock() - self.started

    def per_minute(self, count: int) -> float:
        """``count`` events since the start, per minute (0 during the first second)."""
        elapsed = self.elapsed
        return 60.0 * count / elapsed if elapsed >= 1.0 else 0.0

    def line(self, pages: int, items: int, extra: str = "") -> str:
        """``12:00:01 pages 120 (60.0/min), items 40 (20.0/min)`` and ``extra``."""
        import time

        text = (
            f"{time.strftime('%H:%M:%S')} pages {pages} ({self.per_minute(pages):.1f}/min), "
            f"items {items} ({self.per_minute(items):.1f}/min)"
        )
        return f"{text}; {extra}" if extra else text


def stats_dump(title: str, stats: Mapping[str, Any], *, tty: bool) -> str:
    """The statistics at the end of ``run``, ``worker`` and ``crawl``. On a terminal as Scrapy dumps
    its stats, one ``'name': value`` per line, sorted; off a terminal (a log file, journald, a pipe)
    ``title: {...}`` with the statistics as one JSON object on that line, for a log shipper to read."""
    ordered = dict(sorted(stats.items()))
    if not tty:
        return f"{title}: {json.dumps(ordered, default=str)}"
    import pprint

    return f"{title}:\n" + pprint.pformat(ordered, width=100, sort_dicts=False)


@contextlib.asynccontextmanager
async def periodic_status(output: Output, line: Callable[[], str], every: float) -> AsyncIterator[None]:
    """While the block runs, ``output.status(line())`` every second on a terminal (redrawn in place),
    every ``every`` seconds otherwise (plain lines for a log file or journald: setting status_interval)."""
    interval = min(1.0, every) if output.tty else every

    async def tick() -> None:
        while True:
            await asyncio.sleep(interval)
            output.status(line())

    task = asyncio.create_task(tick(), name="cli-status")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        output.end_live()


@contextlib.asynccontextmanager
async def broker_for_service(url: str) -> AsyncIterator[tuple[Broker, BackendUnavailableError | None]]:
    """The broker of ``url`` for a long-running process (``dispatch``, ``worker``, ``run``), closed
    afterwards, and the outage that kept it from opening (None: it answered). When it cannot be
    reached at start, the process starts anyway: the broker is opened on first use, and the
    dispatcher's relay and the worker's consumer retry with back-off -- an outage at start is an
    outage like any other (a bad URL still fails at once). The caller says it at once, in its
    process's outage log (``outages.down("broker", error)``), so that it is on every status line."""
    broker = open_broker(url)
    down: BackendUnavailableError | None = None
    try:
        try:
            await broker.__aenter__()
        except BackendUnavailableError as exc:
            down = exc
        yield broker, down
    finally:
        await broker.close()
