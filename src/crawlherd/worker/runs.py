"""The ``job_runs`` table: one row per (target, slot), written by the workers.

Status moves ``queued -> running -> succeeded``, or ``running -> failed`` (a retry is scheduled) and
finally ``dead``. The unique key (target_id, slot_at) is what makes workers idempotent: a job whose
run already succeeded is acked and skipped.

**Fencing.** A run has one owner at a time: the ``worker`` and ``started_at`` that :meth:`RunStore.start`
wrote (started_at is the owner's token: a run started again, by another worker or this one, gets a new
one). :meth:`RunStore.finish` changes a run only while the caller's store still owns it, so a worker
that hung (SIGSTOP, a stalled machine) while another took its job over cannot, once it resumes, record
its stale outcome over the run now owned by the other: ``finish`` returns False and writes nothing.

It is also how a worker that read the last listing page of a job owned by another worker (the two
share a frontier) tells the owner how the job's listing ended (:meth:`RunStore.report`): the owner
polls its run's row (:meth:`RunStore.reported`), then acks, retries or dead-letters the job itself.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd._resilience import Batcher
from crawlherd.db.dialect import sql_capabilities
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import DispatchOutbox, JobAttempt, JobRun
from crawlherd.errors import PermanentJobError, summarize
from crawlherd.messages import JobMessage
from crawlherd.worker.jobcrawl import ListingOutcome

__all__ = ["DeadRun", "RunStore", "keep_attempts"]

#: A run in one of these states is not started again (the run key: at most one success per slot).
_FINISHED = ("succeeded", "dead")

#: Runs a store remembers having started (their owner token), at most: an entry is dropped when its run
#: is finished; the oldest go first when jobs given back in an outage were finished elsewhere.
_CLAIMS_KEPT = 10_000

#: A job's run, as a store's claims are keyed: target, slot, attempt.
_RunKey = tuple[int, datetime, int]


def _key(job: JobMessage) -> _RunKey:
    return job.target_id, job.slot_at, job.attempt_count + 1


@dataclass(frozen=True, slots=True)
class DeadRun:
    """A dead job, as ``crawlherd jobs dead`` lists it: its run ``id``, the target and slot, the
    ``attempts`` made, the last ``error`` and when it ended."""

    id: int
    target_id: int
    slot_at: datetime
    attempts: int
    error: str | None
    finished_at: datetime | None


class RunStore:
    """Reads and writes ``job_runs``. ``engine`` is owned by the caller. The config DB unreachable:
    :class:`~crawlherd.errors.BackendUnavailableError` with ``role="database"`` (the worker's calls)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._insert = sql_capabilities(engine).insert
        self._starts: tuple[Any, Any] | None = None
        self._finishes: tuple[Any, Any] | None = None
        self._reads: Batcher[tuple[int, datetime], Any] | None = None
        # the runs this store started and still owns as far as it knows: key -> (worker, started_at)
        self._claims: OrderedDict[_RunKey, tuple[str, datetime]] = OrderedDict()

    async def status(self, job: JobMessage) -> str | None:
        """The recorded status of ``job``'s run, or None when it never started."""
        with translate_db_errors("reading a job run"):
            async with self.engine.connect() as conn:
                row = await conn.execute(
                    select(JobRun.status).where(JobRun.target_id == job.target_id, JobRun.slot_at == job.slot_at)
                )
                return row.scalar_one_or_none()

    async def start(self, job: JobMessage, *, worker: str) -> str | None:
        """Record ``job``'s run as ``running`` (taken by ``worker``) and its attempt; None then. A run
        already ``succeeded`` or ``dead`` is left alone, and its status returned (the run key's
        check and the start are one statement: no other worker can finish the run in between)."""
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "target_id": job.target_id,
            "slot_at": job.slot_at,
            "job_id": job.job_id,
            "status": "running",
            "attempts": job.attempt_count + 1,
            "started_at": now,
            "finished_at": None,
            "worker": worker,
            "error": None,
            "listed_at": None,
            "created_at": now,
            "updated_at": now,
        }
        attempt: dict[str, Any] = {  # console: one row per attempt (job_runs keeps the latest only)
            "target_id": job.target_id, "slot_at": job.slot_at, "attempt": job.attempt_count + 1, "worker": worker,
            "status": "running", "started_at": now, "pages": 0, "items_new": 0, "items_updated": 0,
        }
        start_run, start_attempt = self._start_statements()
        with translate_db_errors("starting a job run"):
            try:
                async with self.engine.begin() as conn:
                    if (await conn.execute(start_run, values)).first() is None:  # finished already: nothing written
                        return (await conn.execute(select(JobRun.status).where(
                            JobRun.target_id == job.target_id, JobRun.slot_at == job.slot_at))).scalar_one_or_none()
                    await conn.execute(start_attempt, attempt)
            except IntegrityError as exc:  # the target was deleted after the job was published
                raise PermanentJobError(
                    f"target {job.target_id} no longer exists: its run cannot be recorded ({summarize(exc)})"
                ) from None
            self._claim(job, worker, now)
            return None

    def _claim(self, job: JobMessage, worker: str, started_at: datetime) -> None:
        claims = self._claims
        claims[_key(job)] = (worker, started_at)
        claims.move_to_end(_key(job))
        while len(claims) > _CLAIMS_KEPT:
            claims.popitem(last=False)

    async def finish(
        self,
        job: JobMessage,
        *,
        status: str,
        error: str | None = None,
        pages: int = 0,
        items_new: int = 0,
        items_updated: int = 0,
    ) -> bool:
        """Record the outcome of ``job``'s run, which this store started: True. False, and nothing
        written, when the run is no longer the one it started -- another worker took it over (see the
        module docstring) -- or it started none, or when it was finished meanwhile with another outcome
        (a succeeded or dead run is never rewritten as something else)."""
        claim = self._claims.get(_key(job))
        if claim is None:
            return False
        now = datetime.now(UTC)
        params = {"b_target": job.target_id, "b_slot": job.slot_at, "b_attempt": job.attempt_count + 1,
                  "b_status": status, "b_error": error, "b_pages": pages, "b_new": items_new,
                  "b_updated": items_updated, "b_now": now, "b_worker": claim[0], "b_started": claim[1]}
        finish_run, finish_attempt = self._finish_statements()
        with translate_db_errors(f"recording a job run as {status}"):
            async with self.engine.begin() as conn:
                if (await conn.execute(finish_run, params)).rowcount != 1:
                    self._claims.pop(_key(job), None)
                    return False
                await conn.execute(finish_attempt, params)  # console: the attempt's outcome
        self._claims.pop(_key(job), None)
        return True

    def _finish_statements(self) -> tuple[Any, Any]:
        """The two updates of :meth:`finish`, built once (the values are bound parameters)."""
        if self._finishes is None:
            outcome: dict[str, Any] = {
                "status": bindparam("b_status"), "error": bindparam("b_error"), "pages": bindparam("b_pages"),
                "items_new": bindparam("b_new"), "items_updated": bindparam("b_updated"),
                "finished_at": bindparam("b_now"),
            }
            self._finishes = (
                update(JobRun)
                .where(JobRun.target_id == bindparam("b_target"), JobRun.slot_at == bindparam("b_slot"),
                       JobRun.worker == bindparam("b_worker"), JobRun.started_at == bindparam("b_started"),
                       # a run finished meanwhile (another worker read its last listing page and reported
                       # it) keeps its outcome: the same outcome may be written again, never another
                       JobRun.status.not_in(_FINISHED) | (JobRun.status == bindparam("b_status")))
                .values(**outcome, updated_at=bindparam("b_now")),
                update(JobAttempt)
                .where(JobAttempt.target_id == bindparam("b_target"), JobAttempt.slot_at == bindparam("b_slot"),
                       JobAttempt.attempt == bindparam("b_attempt"))
                .values(**outcome),
            )
        return self._finishes

    def _start_statements(self) -> tuple[Any, Any]:
        """The two upserts of :meth:`start`, built once (their values are the execution's parameters)."""
        if self._starts is None:
            run = self._insert(JobRun)
            changed = ("status", "attempts", "started_at", "finished_at", "worker", "error", "listed_at", "updated_at")
            attempt = self._insert(JobAttempt)
            self._starts = (
                run.on_conflict_do_update(
                    index_elements=["target_id", "slot_at"],
                    set_={k: run.excluded[k] for k in changed},
                    where=JobRun.status.not_in(_FINISHED),
                ).returning(JobRun.id),
                attempt.on_conflict_do_update(
                    index_elements=["target_id", "slot_at", "attempt"],
                    set_={k: attempt.excluded[k] for k in ("worker", "status", "started_at")},
                ),
            )
        return self._starts

    def _owned(self, job: JobMessage, worker: str) -> Any:
        """The row of ``job``'s current attempt, taken by ``worker``."""
        return (
            (JobRun.target_id == job.target_id)
            & (JobRun.slot_at == job.slot_at)
            & (JobRun.worker == worker)
            & (JobRun.attempts == job.attempt_count + 1)
        )

    async def report(self, job: JobMessage, *, worker: str, outcome: ListingOutcome) -> None:
        """Record the end of ``job``'s listing (read by any worker; ``worker`` is its owner) -- only while
        it is still the owner's running attempt (a run given up and taken again meanwhile is left
        alone): a listing that failed makes the run failed or (``outcome.permanent``) dead; one that
        ended well leaves it ``running`` with ``listed_at`` set -- the owner succeeds it once its detail
        pages are settled (see :mod:`crawlherd.worker.details`)."""
        status: Any = JobRun.status if outcome.error is None else ("dead" if outcome.permanent else "failed")
        now = datetime.now(UTC)
        with translate_db_errors("reporting a listing's end"):
            async with self.engine.begin() as conn:
                await conn.execute(
                    update(JobRun)
                    .where(self._owned(job, worker), JobRun.status == "running")
                    .values(
                        status=status,
                        error=outcome.error,
                        pages=outcome.pages,
                        items_new=outcome.items_new,
                        items_updated=outcome.items_updated,
                        finished_at=None if outcome.error is None else now,
                        listed_at=now,
                        updated_at=now,
                    )
                )

    async def reported(self, job: JobMessage, *, worker: str) -> ListingOutcome | None:
        """The outcome another worker recorded for ``worker``'s running attempt of ``job``, or None
        while there is none. A run this store started and another worker has taken over since (this
        one hung) ends here with an error saying so (:meth:`finish` will then record nothing)."""
        claim = self._claims.get(_key(job))
        if self._reads is None:  # the owners polling at the same moment: one query
            self._reads = Batcher(self._read_runs, max_batch=500, name="crawlherd-run-reads")
        row = await self._reads((job.target_id, job.slot_at))
        if row is not None and claim is not None and (row.worker, row.started_at) != claim:
            return ListingOutcome(error=f"the run was taken over by worker {row.worker}")
        if row is None or (row.worker, row.attempts) != (worker, job.attempt_count + 1):
            return None
        # a listing that ended well leaves the run running with listed_at set (see report)
        if row.status == "queued" or (row.status == "running" and row.listed_at is None):
            return None
        return ListingOutcome(
            pages=row.pages or 0,
            items_new=row.items_new or 0,
            items_updated=row.items_updated or 0,
            error=None if row.status in ("succeeded", "running") else (row.error or row.status),
            permanent=row.status == "dead",
        )

    async def _read_runs(self, runs: list[tuple[int, datetime]]) -> list[Any]:
        """The ``job_runs`` rows of ``runs`` (target, slot), None for a run with no row: one query."""
        with translate_db_errors("reading job runs"):
            async with self.engine.connect() as conn:
                rows = await conn.execute(
                    select(JobRun.target_id, JobRun.slot_at, JobRun.status, JobRun.error, JobRun.pages,
                           JobRun.items_new, JobRun.items_updated, JobRun.worker, JobRun.started_at, JobRun.attempts,
                           JobRun.listed_at)
                    .where(JobRun.target_id.in_({t for t, _ in runs}), JobRun.slot_at.in_({s for _, s in runs}))
                )
                found = {(row.target_id, row.slot_at): row for row in rows}
        return [found.get(run) for run in runs]

    async def close(self) -> None:
        """Stop the reads running (their callers get CancelledError)."""
        if self._reads is not None:
            await self._reads.close()
            self._reads = None

    async def dead(self, limit: int = 100) -> list[DeadRun]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(JobRun.id, JobRun.target_id, JobRun.slot_at, JobRun.attempts, JobRun.error, JobRun.finished_at)
                .where(JobRun.status == "dead")
                .order_by(JobRun.finished_at, JobRun.id)
                .limit(limit)
            )
            return [DeadRun(*row) for row in rows]

    async def requeue(self, run_id: int) -> tuple[str, bytes] | None:
        """Mark dead run ``run_id`` queued again; its original job message (attempt 0) and key, taken
        from the outbox, for the caller to publish. None when there is no such dead run."""
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(DispatchOutbox.key, DispatchOutbox.body)
                    .join(
                        JobRun,
                        (JobRun.target_id == DispatchOutbox.target_id) & (JobRun.slot_at == DispatchOutbox.slot_at),
                    )
                    .where(JobRun.id == run_id, JobRun.status == "dead")
                )
            ).first()
            if row is None:
                return None
            target_id, slot_at = (await conn.execute(
                select(JobRun.target_id, JobRun.slot_at).where(JobRun.id == run_id))).one()
            await keep_attempts(conn, target_id, slot_at)  # the earlier attempts stay visible
            await conn.execute(
                update(JobRun)
                .where(JobRun.id == run_id)
                .values(status="queued", error=None, updated_at=datetime.now(UTC))
            )
            return row[0], row[1].encode("utf-8")

    async def mark_dead_again(self, run_id: int) -> None:
        """Undo :meth:`requeue` when the job could not be published."""
        async with self.engine.begin() as conn:
            await conn.execute(update(JobRun).where(JobRun.id == run_id).values(status="dead"))

    async def counts(self) -> dict[str, int]:
        """Runs by status."""

        async with self.engine.connect() as conn:
            rows = await conn.execute(select(JobRun.status, func.count()).group_by(JobRun.status))
            return {status: n for status, n in rows}


async def keep_attempts(conn: AsyncConnection, target_id: int, slot_at: datetime) -> None:
    """Renumber the run's attempts (``job_attempts``) 1..n below every number it used (below 1 and below
    earlier rounds), keeping their order, so the next round's attempt 1, 2 ... add rows instead of overwriting these.
    (The new numbers are below every existing one at every step: no unique-key clash mid-update.)"""
    A = JobAttempt  # noqa: N806
    lo, hi = (
        await conn.execute(
            select(func.min(A.attempt), func.max(A.attempt)).where(A.target_id == target_id, A.slot_at == slot_at)
        )
    ).one()
    if hi is None or hi < 1:
        return
    shift = hi - min(lo, 1) + 1
    await conn.execute(
        update(A)
        .where(A.target_id == target_id, A.slot_at == slot_at, A.attempt >= 1)
        .values(attempt=A.attempt - shift)
    )
