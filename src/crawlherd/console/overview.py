"""The platform at a glance, from the config DB: what the console's Overview page and ``crawlherd
overview`` show, and what the dispatcher's gauges export. Every count uses an index (see the EXPLAIN
test and ``bench/web.py``).

The counters are the workers' (:class:`~crawlherd.worker.options.WorkerStats`, one definition): the
items new and updated in the last 24 hours are those the jobs that succeeded then counted
(``job_runs``), and each worker's row shows the counters its heartbeat carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, true
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.engine import count_rows, db_now
from crawlherd.db.heartbeat import ProcessInfo, list_processes
from crawlherd.db.models import DispatchOutbox, JobAttempt, JobRun, ScrapeTarget, Website
from crawlherd.dispatch.gauges import due_conditions, outbox_backlog

__all__ = ["OVERDUE_AFTER", "Overview", "overview"]

#: A due target not claimed this long after its run time is overdue (no dispatcher is keeping up).
OVERDUE_AFTER = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Overview:
    """The numbers of the Overview page (``now`` is the database's clock)."""

    now: datetime
    targets_active: int
    targets_due: int
    targets_overdue: int
    dispatched_last_hour: int
    dispatched_last_day: int
    outbox_pending: int
    outbox_oldest_pending_seconds: float | None
    jobs_last_day: dict[str, int]
    items_new_last_day: int
    items_updated_last_day: int
    processes: list[ProcessInfo]
    frontier_queued: int
    frontier_in_flight: int
    #: The websites with the most failed or dead jobs in the last hour, most first.
    failing_websites: list[tuple[str, int]] = field(default_factory=list)

    def alive(self, kind: str) -> int:
        """Processes of ``kind`` beating now."""
        return sum(1 for p in self.processes if p.kind == kind and p.state == "alive")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``--json`` and the live page)."""
        return {
            "now": self.now.isoformat(),
            "targets": {"active": self.targets_active, "due": self.targets_due, "overdue": self.targets_overdue},
            "dispatched": {"last_hour": self.dispatched_last_hour, "last_day": self.dispatched_last_day},
            "outbox": {"pending": self.outbox_pending, "oldest_pending_seconds": self.outbox_oldest_pending_seconds},
            "jobs_last_day": self.jobs_last_day,
            "items_last_day": {"new": self.items_new_last_day, "updated": self.items_updated_last_day},
            "processes": {
                kind: {
                    "alive": self.alive(kind),
                    "gone": sum(1 for p in self.processes if p.kind == kind and p.state == "gone"),
                }
                for kind in ("dispatcher", "worker", "web")
            },
            "workers": [
                {"id": p.id, "state": p.state, "jobs_in_hand": p.jobs_in_hand, "counters": p.info.get("counters", {})}
                for p in self.processes if p.kind == "worker"
            ],
            "frontier": {"queued": self.frontier_queued, "in_flight": self.frontier_in_flight},
            "failing_websites": [{"website": w, "failures": n} for w, n in self.failing_websites],
        }


def _counts(now: datetime) -> dict[str, tuple[Any, ...]]:
    """The Overview's plain counts: field -> (table, conditions...)."""
    T, ob = ScrapeTarget, DispatchOutbox  # noqa: N806
    hour, day = now - timedelta(hours=1), now - timedelta(days=1)
    return {
        "targets_active": (T, T.active == true()),
        "targets_due": (T, *due_conditions(now)),
        "targets_overdue": (T, T.active == true(), T.next_run_at <= now - OVERDUE_AFTER),
        "dispatched_last_hour": (ob, ob.created_at >= hour),
        "dispatched_last_day": (ob, ob.created_at >= day),
    }


async def overview(engine: AsyncEngine, *, failing: int = 5) -> Overview:
    """Everything the Overview page shows, read in one connection."""
    R, T = JobRun, ScrapeTarget  # noqa: N806
    async with engine.connect() as conn:
        now = await db_now(conn)
        counts = {name: await count_rows(conn, *table_where) for name, table_where in _counts(now).items()}
        pending, oldest = await outbox_backlog(conn, now)
        day, hour = now - timedelta(days=1), now - timedelta(hours=1)
        jobs = {
            status: int(n)
            for status, n in (
                await conn.execute(select(R.status, func.count()).where(R.updated_at >= day).group_by(R.status))
            ).all()
        }
        A = JobAttempt  # noqa: N806 - what the attempts started in the last 24 h stored (see WorkerStats)
        items_new, items_updated = (
            await conn.execute(
                select(func.coalesce(func.sum(A.items_new), 0), func.coalesce(func.sum(A.items_updated), 0))
                .where(A.started_at >= day)
            )
        ).one()
        failing_rows = (
            await conn.execute(
                select(Website.name, func.count())
                .select_from(R)
                .join(T, T.id == R.target_id)
                .join(Website, Website.id == T.website_id)
                .where(R.updated_at >= hour, R.status.in_(("failed", "dead")))
                .group_by(Website.name)
                .order_by(func.count().desc(), Website.name)
                .limit(failing)
            )
        ).all()
    processes = await list_processes(engine)
    frontiers = [p.info.get("frontier", {}) for p in processes if p.kind == "worker" and p.state == "alive"]
    return Overview(
        now=now,
        **counts,
        items_new_last_day=int(items_new),
        items_updated_last_day=int(items_updated),
        outbox_pending=pending,
        outbox_oldest_pending_seconds=oldest,
        jobs_last_day=jobs,
        processes=processes,
        frontier_queued=sum(int(f.get("queued", 0)) for f in frontiers),
        frontier_in_flight=sum(int(f.get("in_flight", 0)) for f in frontiers),
        failing_websites=[(str(w), int(n)) for w, n in failing_rows],
    )
