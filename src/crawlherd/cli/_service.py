"""What the long-running services (``dispatch``, ``worker``, ``run``'s worker) share: their options and
the stores they open at start -- one place, so that every service starts alike."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import Broker
from crawlherd.cli._common import Output, broker_for_service, broker_option, config_db, database_option, output_options
from crawlherd.cli._console import metrics_port_option, start_metrics
from crawlherd.errors import BackendUnavailableError
from crawlherd.settings import Settings

__all__ = ["service_options", "service_stores"]

F = TypeVar("F", bound=Callable[..., Any])


def service_options(func: F) -> F:
    """The options of every service: config DB, broker, metrics port, -q and --json."""
    for option in (database_option, broker_option, metrics_port_option, output_options):
        func = option(func)
    return func


@contextlib.asynccontextmanager
async def service_stores(
    settings: Settings, out: Output, *, metrics_port: int | None, pool_size: int | None = None,
) -> AsyncIterator[tuple[AsyncEngine, Broker, BackendUnavailableError | None]]:
    """A service's config DB (refused while it has no tables: its set-up is ``crawlherd db upgrade``;
    waited for while it does not answer) and broker with the outage that kept it from opening
    (:func:`~crawlherd.cli._common.broker_for_service`), both closed at the end; its metrics served on
    ``metrics_port`` from the start."""
    async with (
        config_db(settings, create=False, pool_size=pool_size, waiting=out) as engine,
        broker_for_service(settings.effective_broker_url) as (broker, broker_down),
    ):
        start_metrics(metrics_port)
        yield engine, broker, broker_down
