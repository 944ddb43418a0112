"""``manage.py crawlherd_worker``: a crawlherd worker over the Django project's config DB, with the flags
of ``crawlherd worker`` (``--concurrency``, ``--page-dispatcher``, ``--page-concurrency``,
``--max-attempts``, ``--backoff``, ``--allow-private``, ``--frontier-url``, ``--loop``): they are read
from the CLI's own option list (:func:`crawlherd.cli.worker.worker_options`), so the two cannot drift."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError

from crawlherd.brokers import open_broker
from crawlherd.cli._loop import run_async
from crawlherd.cli._signals import stop_on_signals
from crawlherd.cli.worker import make_worker, waiting_for, worker_options
from crawlherd.contrib.django.settings import crawlherd_settings
from crawlherd.db import create_engine
from crawlherd.errors import CrawlherdError

__all__ = ["Command", "worker_flags"]


def worker_flags() -> list[click.Option]:
    """The options of ``crawlherd worker`` that configure the worker (not its database, broker, output)."""

    @worker_options
    def probe(**_: Any) -> None: ...

    command = click.command()(probe)
    return [p for p in command.params if isinstance(p, click.Option)]


def _converter(option: click.Option) -> Any:
    def convert(value: str) -> Any:
        try:
            return option.type.convert(value, option, None)
        except click.BadParameter as exc:
            raise CommandError(f"{option.opts[0]}: {exc.message}") from None

    return convert


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Consume scrape jobs and crawl them (as `crawlherd worker`, with its flags); SIGTERM or Ctrl+C stops it "
        "cleanly. Unset flags come from settings.CRAWLHERD, the CRAWLHERD_* environment and crawlherd.toml."
    )

    def add_arguments(self, parser: Any) -> None:
        for option in worker_flags():
            assert option.name is not None
            if option.is_flag:
                parser.add_argument(*option.opts, dest=option.name, action="store_const",
                                    const=option.flag_value, default=None, help=option.help)
            else:
                parser.add_argument(*option.opts, dest=option.name, type=_converter(option), default=None,
                                    metavar=option.metavar or option.name.upper(), help=option.help)

    def handle(self, *args: Any, **options: Any) -> None:
        overrides = {o.name: options.get(o.name) for o in worker_flags() if o.name}
        try:
            settings = crawlherd_settings(**overrides)
            with contextlib.suppress(asyncio.CancelledError):
                run_async(self._run(settings), settings.event_loop)
        except CrawlherdError as exc:
            raise CommandError(str(exc)) from exc

    async def _run(self, settings: Any) -> None:
        engine = create_engine(settings.database_url)
        try:
            async with open_broker(settings.effective_broker_url) as broker:
                worker = make_worker(engine, broker, settings)
                stop = asyncio.Event()
                with stop_on_signals(stop, waiting_for(worker)):
                    async with worker:
                        await worker.run(stop)
                stats = worker.stats
                self.stdout.write(f"worker stopped: {stats.succeeded} done, {stats.retried} retried, "
                                  f"{stats.dead} dead, {stats.items_new} new items")
        finally:
            await engine.dispose()
