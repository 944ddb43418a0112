"""Test helpers that drive the dispatch service's parts to completion."""

from __future__ import annotations

from crawlherd.dispatch.dispatch_service import DispatchService
from crawlherd.dispatch.outbox import TickResult
from crawlherd.dispatch.relay import RelayResult


async def dispatch_due(service: DispatchService) -> TickResult:
    """Tick until no target is due; the totals."""
    total = TickResult()
    while True:
        result = await service.tick()
        total += result
        if result.targets < service.options.batch_size:
            return total


async def relay_all(service: DispatchService) -> RelayResult:
    """Relay until nothing is ready to publish (rows waiting for a retry are left to wait)."""
    total = RelayResult()
    while True:
        result = await service.relay()
        total += result
        if result.leased < service.options.relay_batch or result.failed:
            return total
