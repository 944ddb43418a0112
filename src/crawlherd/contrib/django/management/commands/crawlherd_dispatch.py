"""``manage.py crawlherd_dispatch [--once]``: crawlherd's dispatcher service over the Django project's
config DB (see crawlherd.contrib.django for the settings)."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from crawlherd.brokers import open_broker
from crawlherd.cli._signals import stop_on_signals
from crawlherd.contrib.cycle import run_dispatch_cycle
from crawlherd.contrib.django.settings import crawlherd_settings
from crawlherd.db import create_engine
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService, RelayResult, TickResult
from crawlherd.errors import CrawlherdError


class Command(BaseCommand):  # type: ignore[misc]
    help = "Publish one job per scrape target per slot (as `crawlherd dispatch`)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--once", action="store_true", help="One cycle, then exit (for cron).")
        parser.add_argument("--interval", type=float, default=1.0, help="Seconds between cycles (default 1).")
        parser.add_argument("--batch-size", type=int, default=500, help="Targets per tick (default 500).")
        parser.add_argument("--lease", type=float, default=60.0, help="Outbox lease in seconds (default 60).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = crawlherd_settings()
            if options["once"]:
                result = run_dispatch_cycle(settings, batch_size=options["batch_size"], lease=options["lease"])
                tick, relay = result.tick, result.relay
                self.stdout.write(f"dispatch: {tick.inserted} job(s) from {tick.targets} due target(s); "
                                  f"published {relay.published}, failed {relay.failed}")
                if relay.failed:
                    raise CommandError(f"{relay.failed} job message(s) could not be published; they are retried")
                return
            asyncio.run(self._loop(settings, options))
        except CrawlherdError as exc:
            raise CommandError(str(exc)) from exc

    async def _loop(self, settings: Any, options: dict[str, Any]) -> None:
        engine = create_engine(settings.database_url)
        try:
            async with open_broker(settings.effective_broker_url) as broker:
                service = DispatchService(
                    engine,
                    broker,
                    DispatchOptions(batch_size=options["batch_size"], lease=options["lease"]),
                )

                def progress(tick: TickResult, relay: RelayResult) -> None:
                    self.stdout.write(f"dispatch: {tick.inserted} job(s) from {tick.targets} due target(s); "
                                      f"published {relay.published}, failed {relay.failed}")

                stop = asyncio.Event()
                with stop_on_signals(stop):
                    await service.run(interval=options["interval"], stop=stop, on_cycle=progress)
                self.stdout.write("dispatcher stopped")
        finally:
            await engine.dispose()
