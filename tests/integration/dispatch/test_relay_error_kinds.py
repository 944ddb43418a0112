"""The relay tells a broker outage from a bug by the error's type (PUBLISH_OUTAGES), never by its text:
an outage is said once and the rows wait their back-off; a bug is logged as an error, and the rows wait
too (nothing is lost), without a "broker unavailable" line."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers.memory import MemoryBroker
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService
from crawlherd.errors import BackendUnavailableError
from tests.support.db import add_targets, add_website, database_now
from tests.support.dispatch import dispatch_due

HOUR = timedelta(hours=1)


class FailingBroker(MemoryBroker):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def publish(self, body: bytes, **kw: object) -> None:  # type: ignore[override]
        raise self.error


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (BackendUnavailableError("connection lost", backend="amqp", role="broker"), True),
        (TimeoutError(), True),
        # a bug whose text reads like an outage is still a bug
        (RuntimeError("broker unavailable: connection refused"), False),
    ],
)
async def test_publish_errors_are_told_apart_by_type(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture, error: Exception, outage: bool
) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 2, every=HOUR, anchor=now - timedelta(seconds=10))
    service = DispatchService(engine, FailingBroker(error), DispatchOptions(backoff=600.0, publish_concurrency=1))
    await dispatch_due(service)
    with caplog.at_level(logging.DEBUG, logger="crawlherd.dispatch"):
        result = await service.relay()
    assert result.failed == 2 and result.published == 0
    assert ("broker" in service.outages.down_now) is outage
    warned = [r for r in caplog.records if "broker unavailable" in r.getMessage() and r.levelno == logging.WARNING]
    errors = [r for r in caplog.records if "unexpected error" in r.getMessage() and r.levelno == logging.ERROR]
    assert (len(warned), len(errors)) == ((1, 0) if outage else (0, 1))
    assert (await service.relay()).leased == 0  # the rows wait their back-off either way
