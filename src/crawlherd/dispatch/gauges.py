"""The dispatcher's gauges (targets due, outbox backlog), read from the config DB; the console's
Overview reads the same numbers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, true
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd import metrics
from crawlherd.db.engine import count_rows, db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import DispatchOutbox, ScrapeTarget

__all__ = ["due_conditions", "outbox_backlog", "refresh_dispatch_gauges"]


async def outbox_backlog(conn: AsyncConnection, now: datetime) -> tuple[int, float | None]:
    """Pending outbox rows and the age (seconds) of the oldest one."""
    ob = DispatchOutbox
    count, oldest = (
        await conn.execute(select(func.count(), func.min(ob.created_at)).where(ob.status == "pending"))
    ).one()
    if oldest is not None and oldest.tzinfo is None:  # SQLite aggregates lose the column type
        oldest = datetime.fromisoformat(str(oldest)).replace(tzinfo=now.tzinfo)
    elif isinstance(oldest, str):
        oldest = datetime.fromisoformat(oldest).replace(tzinfo=now.tzinfo)
    return int(count), (max(0.0, (now - oldest).total_seconds()) if oldest is not None else None)


def due_conditions(now: datetime) -> tuple[Any, ...]:
    """The conditions of a due target: active, and its next run at or before ``now``."""
    T = ScrapeTarget  # noqa: N806
    return T.active == true(), T.next_run_at <= now


async def refresh_dispatch_gauges(engine: AsyncEngine) -> None:
    """Set the dispatcher's gauges (targets due, outbox pending and its oldest row's age). A config DB
    that went away is an outage (BackendUnavailableError), as for the tick that reads them."""
    T = ScrapeTarget  # noqa: N806
    with translate_db_errors("reading the dispatch gauges"):
        async with engine.connect() as conn:
            now = await db_now(conn)
            due = await count_rows(conn, T, *due_conditions(now))
            pending, oldest = await outbox_backlog(conn, now)
    metrics.TARGETS_DUE.set(due)
    metrics.OUTBOX_PENDING.set(pending)
    metrics.OUTBOX_OLDEST.set(oldest or 0.0)
