"""Job runs as the console's Jobs page and ``crawlherd jobs list`` / ``show`` show them: filtered by
status, website, target and time, newest first, paged by id (keyset: fast at any depth)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.db.models import RUN_STATUSES, JobAttempt, JobDetail, JobRun, ManualRun, ScrapeTarget, Website
from crawlherd.errors import CrawlherdError

__all__ = ["JOB_STATUSES", "AttemptInfo", "JobFilter", "JobInfo", "details_in", "get_job", "list_jobs"]

#: Statuses a job can be listed by; "retrying" is a failed run waiting for its next attempt.
JOB_STATUSES = ("queued", "running", "succeeded", "retrying", "dead")


def _shown(status: str) -> str:
    return "retrying" if status == "failed" else status


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What to list: any of status, website name, target id, updated since / until; ``before_id`` pages."""

    status: str | None = None
    website: str | None = None
    target_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None
    limit: int = 50

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in JOB_STATUSES:
            raise CrawlherdError(f"unknown job status {self.status!r}: use one of {', '.join(JOB_STATUSES)}")
        if not 1 <= self.limit <= 10_000:
            raise CrawlherdError("limit must be between 1 and 10000")


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """One attempt of a job; ``attempt`` counts every attempt the job had, in order, retries of a dead
    job included."""

    attempt: int
    worker: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    pages: int
    items_new: int
    items_updated: int
    error: str | None

    @property
    def seconds(self) -> float | None:
        return (self.finished_at - self.started_at).total_seconds() if self.finished_at else None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job run (one per target and slot) with its website and, for ``get_job``, its attempts."""

    id: int
    target_id: int
    website: str
    keywords: str
    location: str
    slot_at: datetime
    status: str
    attempts: int
    worker: str | None
    started_at: datetime | None
    finished_at: datetime | None
    pages: int
    items_new: int
    items_updated: int
    error: str | None
    #: When the running attempt's listing ended, and the run's detail pages still out and failed.
    listed_at: datetime | None = None
    details_out: int = 0
    details_failed: int = 0
    manual: bool = False
    history: list[AttemptInfo] = field(default_factory=list)
    #: Some of the run's failed detail pages, with their reasons (``get_job``).
    detail_errors: list[str] = field(default_factory=list)

    @property
    def progress(self) -> str:
        """Where a job stands beyond its status: "listing done, N detail pages still out" while a running
        job waits for its detail pages (it succeeds once none is out); "N detail pages failed"."""
        parts = []
        if self.status == "running":
            parts.append("reading its listing" if self.listed_at is None else
                         f"listing done, {self.details_out} detail pages still out")
        if self.details_failed:
            parts.append(f"{self.details_failed} detail pages failed")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["progress"] = self.progress
        for k, v in list(out.items()):
            if isinstance(v, datetime):
                out[k] = v.isoformat()
        out["history"] = [
            {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(a).items()} for a in self.history
        ]
        return out


def details_in(status: str) -> Any:
    """How many of a run's detail pages are in ``status`` (a subquery of the run's row)."""
    D, R = JobDetail, JobRun  # noqa: N806
    return (
        select(func.count()).select_from(D)
        .where(D.target_id == R.target_id, D.slot_at == R.slot_at, D.status == status)
        .scalar_subquery()
    )


def _select() -> Any:
    R, T, W = JobRun, ScrapeTarget, Website  # noqa: N806
    return (
        select(
            R.id, R.target_id, W.name, T.keywords, T.location, R.slot_at, R.status, R.attempts, R.worker,
            R.started_at, R.finished_at, R.pages, R.items_new, R.items_updated, R.error, R.listed_at,
            details_in("out"), details_in("failed"),
        )
        .join(T, T.id == R.target_id)
        .join(W, W.id == T.website_id)
    )


def _info(row: Any) -> JobInfo:
    values = list(row)
    values[6] = _shown(values[6])
    values[14] = redact_url(values[14]) if values[14] else values[14]  # an error may quote a URL
    return JobInfo(*values)


async def list_jobs(engine: AsyncEngine, flt: JobFilter | None = None) -> list[JobInfo]:
    """Jobs matching ``flt``, newest (highest id) first."""
    flt = flt or JobFilter()
    R = JobRun  # noqa: N806
    stmt = _select().order_by(R.id.desc()).limit(flt.limit)
    if flt.status is not None:
        stmt = stmt.where(R.status == ("failed" if flt.status == "retrying" else flt.status))
    if flt.website:
        stmt = stmt.where(Website.name == flt.website)
    if flt.target_id is not None:
        stmt = stmt.where(R.target_id == flt.target_id)
    if flt.since is not None:
        stmt = stmt.where(R.updated_at >= flt.since)
    if flt.until is not None:
        stmt = stmt.where(R.updated_at < flt.until)
    if flt.before_id is not None:
        stmt = stmt.where(R.id < flt.before_id)
    async with engine.connect() as conn:
        return [_info(row) for row in (await conn.execute(stmt)).all()]


async def get_job(engine: AsyncEngine, run_id: int) -> JobInfo:
    """One job with its attempts; :class:`CrawlherdError` when there is none."""
    A = JobAttempt  # noqa: N806
    async with engine.connect() as conn:
        row = (await conn.execute(_select().where(JobRun.id == run_id))).first()
        if row is None:
            raise CrawlherdError(f"no job run with id {run_id} (see `crawlherd jobs list`)")
        info = _info(row)
        attempts = (
            await conn.execute(
                select(
                    A.attempt, A.worker, A.status, A.started_at, A.finished_at, A.pages, A.items_new,
                    A.items_updated, A.error,
                )
                .where(A.target_id == info.target_id, A.slot_at == info.slot_at)
                .order_by(A.started_at, A.attempt)
            )
        ).all()
        detail_errors = (await conn.execute(
            select(JobDetail.error)
            .where(JobDetail.target_id == info.target_id, JobDetail.slot_at == info.slot_at,
                   JobDetail.status == "failed")
            .order_by(JobDetail.id).limit(10)
        )).scalars().all()
        manual = (
            await conn.execute(
                select(ManualRun.id).where(ManualRun.target_id == info.target_id, ManualRun.slot_at == info.slot_at)
            )
        ).first() is not None
    history = [
        AttemptInfo(n, *a[1:8], redact_url(a[8]) if a[8] else None) for n, a in enumerate(attempts, start=1)
    ]
    return replace(info, manual=manual, history=history,
                   detail_errors=[redact_url(e) for e in detail_errors if e])


assert set(RUN_STATUSES) - {"failed"} <= set(JOB_STATUSES)
