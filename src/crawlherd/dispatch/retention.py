"""Retention of the config DB's history: finished ``job_runs`` rows and items not seen for a while.

Nothing is pruned on its own: ``crawlherd db prune`` (or :func:`prune_history`) deletes, in chunks so
that no lock is held long,

- ``job_runs`` rows **finished** (``succeeded``, ``failed``, ``dead``) more than ``runs_older_than``
  ago -- a ``queued`` or ``running`` row is never touched. A run row is the worker's run key (a
  redelivered job whose row says ``succeeded`` is skipped), so keep runs at least as long as a message
  can stay in a broker plus the outbox retention (7 days); below one day is refused;
- items whose ``last_seen`` is more than ``items_unseen_for`` ago (postings taken down long since). An
  item found again later is stored again as new.

The cut-off is computed on the database's clock, like every other time the service compares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.engine import db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import JobRun, StoredItem
from crawlherd.errors import ConfigurationError

__all__ = ["FINISHED_RUN_STATUSES", "MIN_RUNS_RETENTION", "PruneCounts", "prune_history"]

FINISHED_RUN_STATUSES = ("succeeded", "failed", "dead")
#: Run rows younger than this are never pruned: they may still be the run key of a message in a broker.
MIN_RUNS_RETENTION = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class PruneCounts:
    """How many rows :func:`prune_history` deleted (or, with ``dry_run``, would delete)."""

    runs: int = 0
    items: int = 0


async def prune_history(
    engine: AsyncEngine,
    *,
    runs_older_than: timedelta | None = None,
    items_unseen_for: timedelta | None = None,
    dry_run: bool = False,
    chunk: int = 5000,
) -> PruneCounts:
    """Delete finished runs older than ``runs_older_than`` and items unseen for ``items_unseen_for``
    (None: keep them). ``dry_run`` counts without deleting."""
    if runs_older_than is not None and runs_older_than < MIN_RUNS_RETENTION:
        raise ConfigurationError(
            f"runs older than {runs_older_than} cannot be pruned: keep job runs at least 1 day "
            "(a run row is the run key of a job that may still be in the broker)"
        )
    if items_unseen_for is not None and items_unseen_for <= timedelta(0):
        raise ConfigurationError(f"items unseen for {items_unseen_for}: give a positive duration")
    if chunk < 1:
        raise ConfigurationError(f"chunk={chunk!r} must be >= 1")
    runs = items = 0
    with translate_db_errors("pruning the history"):
        if runs_older_than is not None:
            runs = await _prune(
                engine,
                JobRun,
                lambda cutoff: (JobRun.status.in_(FINISHED_RUN_STATUSES))
                & (func.coalesce(JobRun.finished_at, JobRun.updated_at) < cutoff),
                runs_older_than,
                dry_run,
                chunk,
            )
        if items_unseen_for is not None:
            items = await _prune(
                engine, StoredItem, lambda cutoff: StoredItem.last_seen < cutoff, items_unseen_for, dry_run, chunk
            )
    return PruneCounts(runs=runs, items=items)


async def _prune(
    engine: AsyncEngine,
    model: type[JobRun] | type[StoredItem],
    where: Callable[[datetime], ColumnElement[bool]],
    age: timedelta,
    dry_run: bool,
    chunk: int,
) -> int:
    async with engine.connect() as conn:
        cutoff = await db_now(conn) - age
    condition = where(cutoff)
    if dry_run:
        async with engine.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(model).where(condition))).scalar_one())
    deleted = 0
    while True:
        async with engine.begin() as conn:
            ids = select(model.id).where(condition).limit(chunk).scalar_subquery()
            count = (await conn.execute(delete(model).where(model.id.in_(ids)))).rowcount
        deleted += count
        if count < chunk:
            return deleted
