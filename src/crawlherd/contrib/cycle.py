"""One dispatch cycle from the settings: what every scheduled entry point runs (cron's ``crawlherd
dispatch --once``, the Lambda handler, the Celery beat task, ``manage.py crawlherd_dispatch --once``).

The cycle claims the due targets, writes their outbox rows and relays what is pending to the broker,
exactly as the dispatcher service does; ``deadline`` (seconds) makes it end in time: each relay round
gets a deadline of its own (:func:`cycle_timing`: a quarter of the time, at most half the lease) and no
batch or round starts later than that long before the cycle's deadline, so the round in flight -- up to
``relay_batch`` rows -- ends inside the time (rows it leased and did not publish are published by the
next cycle once their lease runs out: a duplicate the workers drop, never a loss).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import Broker, open_broker
from crawlherd.db import create_engine, current_revision, head_revision
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService, RelayResult, TickResult
from crawlherd.errors import ConfigurationError
from crawlherd.settings import Settings, load_settings

__all__ = ["CycleResult", "cycle_timing", "dispatch_cycle", "run_dispatch_cycle"]


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did: the ticks (targets claimed, slots found, outbox rows written), the relay
    (messages published or not), and whether its deadline stopped it early."""

    tick: TickResult
    relay: RelayResult
    stopped_early: bool

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able summary (what the Lambda handler and the Celery task return): ``targets``,
        ``slots``, ``inserted``, ``published``, ``failed``, ``stopped_early``."""
        tick, relay = self.tick, self.relay
        return {"targets": tick.targets, "slots": tick.slots, "inserted": tick.inserted,
                "published": relay.published, "failed": relay.failed, "stopped_early": self.stopped_early}


@contextlib.asynccontextmanager
async def _deadline(seconds: float | None) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    if seconds is not None and seconds <= 0:
        stop.set()
    timer = None
    if seconds is not None and seconds > 0:
        timer = asyncio.get_running_loop().call_later(seconds, stop.set)
    try:
        yield stop
    finally:
        if timer is not None:
            timer.cancel()


def cycle_timing(deadline: float | None, lease: float) -> tuple[float | None, float | None]:
    """(seconds after which no tick batch or relay round starts, each relay round's own deadline) for a
    cycle that must end within ``deadline`` seconds (None: no limit -- the relay's defaults). A round
    started at the last moment still ends by ``deadline``: the two add up to it."""
    if deadline is None or deadline <= 0:
        return deadline, None
    round_timeout = min(lease / 2, deadline / 4)
    return deadline - round_timeout, round_timeout


async def dispatch_cycle(
    settings: Settings | None = None,
    *,
    deadline: float | None = None,
    batch_size: int = 500,
    lease: float = 60.0,
    engine: AsyncEngine | None = None,
    broker: Broker | None = None,
) -> CycleResult:
    """Run one dispatch cycle with ``settings`` (default: crawlherd.toml and ``CRAWLHERD_*``), on
    ``engine`` and ``broker`` when given (the caller's, left open: a warm serverless function keeps
    them), else on its own, opened from the settings and closed at the end.

    The config DB must be migrated (``crawlherd db upgrade``): a scheduled job never changes the schema.
    """
    settings = settings or load_settings()
    own_engine = engine is None
    db = engine or create_engine(settings.database_url)
    try:
        current, head = await current_revision(db), head_revision()
        if current != head:
            raise ConfigurationError(
                f"the config DB is at migration {current or '(none)'}, this crawlherd needs {head}: "
                "run `crawlherd db upgrade` first")
        async with contextlib.AsyncExitStack() as stack:
            if broker is None:
                broker = await stack.enter_async_context(open_broker(settings.effective_broker_url))
            stop_after, round_timeout = cycle_timing(deadline, lease)
            stop = await stack.enter_async_context(_deadline(stop_after))
            options = DispatchOptions(batch_size=batch_size, lease=lease, round_timeout=round_timeout)
            tick, relay = await DispatchService(db, broker, options).run_once(stop)
            return CycleResult(tick, relay, stop.is_set())
    finally:
        if own_engine:
            await db.dispose()


def run_dispatch_cycle(settings: Settings | None = None, **options: Any) -> CycleResult:
    """:func:`dispatch_cycle` from synchronous code (its own event loop)."""
    return asyncio.run(dispatch_cycle(settings, **options))
