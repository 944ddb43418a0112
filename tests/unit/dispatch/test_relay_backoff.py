"""The relay's back-off for a failed row is the kernel's back-off (no jitter: a row's retry time is its own)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers.memory import MemoryBroker
from crawlherd.db.engine import create_engine
from crawlherd.dispatch.relay import Relay, RelayOptions


def _relay(engine: AsyncEngine, **options: float) -> Relay:
    return Relay(engine, MemoryBroker(), RelayOptions(**options))  # type: ignore[arg-type]


async def test_a_row_that_failed_many_times_waits_the_cap() -> None:
    engine = create_engine("sqlite:///:memory:")
    try:
        relay = _relay(engine, backoff=1.0, max_backoff=300.0)
        # a row failing through a long outage: thousands of attempts, and no overflow
        assert [relay.backoff_for(a) for a in (1, 2, 9, 10, 2_000, 1_000_000)] == [1.0, 2.0, 256.0, 300.0, 300.0, 300.0]
        assert _relay(engine, backoff=0.0).backoff_for(3) == 0.0
    finally:
        await engine.dispose()
