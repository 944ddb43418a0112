"""``manage.py crawlherd_worker``: a crawlherd worker over the Django project's config DB."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from crawlherd.brokers import open_broker
from crawlherd.cli._signals import stop_on_signals
from crawlherd.contrib.django.settings import crawlherd_settings
from crawlherd.db import create_engine
from crawlherd.errors import CrawlherdError
from crawlherd.fetch.base import FetchLimits
from crawlherd.worker.worker import Worker, WorkerOptions


class Command(BaseCommand):  # type: ignore[misc]
    help = "Consume scrape jobs and crawl them (as `crawlherd worker`); SIGTERM stops it cleanly."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--concurrency", type=int, default=4, help="Jobs at once (default 4).")
        parser.add_argument("--max-attempts", type=int, default=3, help="Attempts before a job is dead (default 3).")
        parser.add_argument("--backoff", type=float, default=5.0, help="First retry delay in seconds (default 5).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            asyncio.run(self._run(options))
        except CrawlherdError as exc:
            raise CommandError(str(exc)) from exc

    async def _run(self, options: dict[str, Any]) -> None:
        settings = crawlherd_settings()
        engine = create_engine(settings.database_url)
        try:
            async with open_broker(settings.effective_broker_url) as broker:
                limits = FetchLimits(allow_private_addresses=settings.allow_private_addresses,
                                     user_agent=settings.user_agent)
                worker = Worker(
                    engine,
                    broker,
                    WorkerOptions(
                        concurrency=options["concurrency"],
                        max_attempts=options["max_attempts"],
                        backoff=options["backoff"],
                        max_backoff=max(options["backoff"], 600.0),
                        limits=limits,
                        frontier_url=settings.effective_frontier_url,
                    ),
                )
                stop = asyncio.Event()
                async with worker:
                    with stop_on_signals(stop):
                        stats = await worker.run(stop)
                self.stdout.write(f"worker stopped: {stats.succeeded} done, {stats.retried} retried, "
                                  f"{stats.dead} dead, {stats.items_new} new items")
        finally:
            await engine.dispose()
