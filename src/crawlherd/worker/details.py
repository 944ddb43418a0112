"""The detail pages a job run waits for: ``job_details``, one row per run and item (:class:`DetailLedger`).

A job is ``succeeded`` only when its listing chain has ended **and** every detail page it queued is
settled -- stored, or failed with its reason. The listing page that queues a detail page writes its
row (``out``) *before* queueing it, so that no worker can settle a page whose row is not written yet;
a page the frontier did not queue (its dedup key: queued in this revisit period already, by another
run) is not this run's to wait for, and its fresh row is removed again. Whoever fetches a detail page
settles it by item: every run waiting for that item's page is settled with it (a run and another one
that found the same item, or two attempts of one run, wait for the same page). The owner of the job
counts the run's ``out`` rows (:meth:`DetailLedger.out`) until none is left.

Settles are group-committed (the resilience kernel's :class:`~crawlherd._resilience.Batcher`): the
detail pages that finish while a write is out are settled in the next one. A settle that cannot be
written (the config DB down) fails the page: its lease goes back and it is fetched and settled again.

The owner does not only poll: the ledger remembers, in process, which runs wait for which items
(:meth:`DetailLedger.expect`), and the settle written here that ends the last of a run's pages known
here wakes the run's owner at once (:meth:`DetailLedger.wait`), so that a job's slot is free for the next
job as soon as its pages are done rather than at its next poll. A hint only: the table decides.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd._resilience import Batcher
from crawlherd.db.dialect import sql_capabilities
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import JobDetail
from crawlherd.messages import JobMessage

__all__ = ["DetailLedger", "RunKey"]

#: A job run's key: its target and slot.
RunKey = tuple[int, datetime]

#: A settle: the item, and None (stored) or why its page failed.
_Settle = tuple[str, "str | None"]

#: Items whose waiting runs a ledger remembers, at most (past it, it forgets them all: owners then poll).
_WATCHED = 100_000


# The order every writer of job_details takes its rows' locks in -- by run, then item; a settle, by item --
# so that two workers' writes at once (their pages' settles, their listing pages' rows) wait for each other
# rather than deadlock (PostgreSQL fails one of two transactions that lock shared rows in opposite orders).
def _row_key(row: dict[str, Any]) -> tuple[int, datetime, str]:
    return row["target_id"], row["slot_at"], row["item"]


def _forget_key(row: dict[str, Any]) -> tuple[int, datetime, str]:
    return row["b_target"], row["b_slot"], row["b_item"]


def _settle_order(param: dict[str, Any]) -> str:
    return str(param["b_item"])


class DetailLedger:
    """``job_details`` on ``engine`` (the caller's): :meth:`expect` rows before the pages are queued,
    :meth:`settle` them as the pages are stored or fail, :meth:`out` for the owner."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._insert = sql_capabilities(engine).insert
        self._settles: Batcher[_Settle, None] | None = None
        self._forgets: Batcher[tuple[RunKey, tuple[str, ...]], None] | None = None
        # a run's new rows, told by the one statement that writes them
        self._expect_stmt = (self._insert(JobDetail).on_conflict_do_nothing()
                             .returning(JobDetail.target_id, JobDetail.slot_at, JobDetail.item))
        self._settle_stmt = (
            update(JobDetail)
            .where(JobDetail.item == bindparam("b_item"), JobDetail.status == "out")
            .values(status=bindparam("b_status"), error=bindparam("b_error"), updated_at=bindparam("b_at"))
            .execution_options(synchronize_session=False)
        )
        self._forget_stmt = delete(JobDetail).where(
            JobDetail.target_id == bindparam("b_target"), JobDetail.slot_at == bindparam("b_slot"),
            JobDetail.item == bindparam("b_item"),
        ).execution_options(synchronize_session=False)
        self._outs: Batcher[RunKey, int] | None = None
        # The in-process hints (see the module docstring): item -> the runs waiting for its page; run ->
        # its items not settled here yet; the runs whose items known here are all settled; their owners.
        self._waiting: dict[str, set[RunKey]] = {}
        self._items: dict[RunKey, set[str]] = {}
        self._ready: set[RunKey] = set()
        self._wakes: dict[RunKey, asyncio.Event] = {}

    async def expect(self, run: RunKey, items: Sequence[str]) -> set[str]:
        """Write an ``out`` row for each of ``items`` (hex fingerprints) of ``run``; the items whose row
        is new (a row already there -- the same run's earlier attempt queued the page -- is kept)."""
        if not items:
            return set()
        self.watch(run, items)  # before the rows: a settle written meanwhile only wakes the owner early
        with translate_db_errors("recording a run's detail pages"):
            async with self.engine.begin() as conn:
                return (await self.expect_in(conn, [(run, items)]))[0]

    def watch(self, run: RunKey, items: Iterable[str]) -> None:
        """Remember that ``run`` waits for ``items``' pages (the in-process hint): call it before
        :meth:`expect_in` writes their rows."""
        self._watch(run, items)

    async def expect_in(self, conn: AsyncConnection, wanted: Sequence[tuple[RunKey, Sequence[str]]]) -> list[set[str]]:
        """:meth:`expect` for several runs' items in the caller's transaction on ``conn``: one statement
        (``INSERT ... ON CONFLICT DO NOTHING RETURNING``); the new items of each, in order. An item asked
        for twice for one run is new for the first asker only, as if they had asked one after the other."""
        now = datetime.now(UTC)
        rows = [{"target_id": t, "slot_at": s, "item": i, "status": "out", "updated_at": now}
                for (t, s), items in wanted for i in dict.fromkeys(items)]
        rows.sort(key=_row_key)  # every writer locks job_details rows in one order (see _settle_order)
        if not rows:
            return [set() for _ in wanted]
        result = await conn.execute(self._expect_stmt, rows)
        new = {(t, s, i) for t, s, i in result}
        out: list[set[str]] = []
        for (t, s), items in wanted:
            mine = {i for i in items if (t, s, i) in new}
            new -= {(t, s, i) for i in mine}
            out.append(mine)
        return out

    async def forget(self, run: RunKey, items: Sequence[str]) -> None:
        """Remove ``run``'s rows of ``items``: pages the frontier did not queue for it (with the rows the
        other pages forget meanwhile: one statement for them all)."""
        if not items:
            return
        self._settled_here(items, runs=(run,))
        if self._forgets is None:
            self._forgets = Batcher(self._forget, max_batch=500, name="crawlherd-detail-forgets")
        await self._forgets((run, tuple(items)))

    async def _forget(self, forgets: list[tuple[RunKey, tuple[str, ...]]]) -> list[None | BaseException]:
        rows = sorted(({"b_target": t, "b_slot": s, "b_item": i} for (t, s), items in forgets for i in items),
                      key=_forget_key)
        with translate_db_errors("recording a run's detail pages"):
            async with self.engine.begin() as conn:
                await conn.execute(self._forget_stmt, rows)
        return [None] * len(forgets)

    async def settle(self, item: str, error: str | None = None) -> None:
        """The detail page of ``item`` is stored (``error`` None) or failed for good (``error`` says why):
        every run waiting for it is settled. Returns once written (with the settles waiting meanwhile)."""
        if self._settles is None:
            self._settles = Batcher(self._write, max_batch=500, name="crawlherd-detail-settles")
        await self._settles((item, error))

    async def _write(self, settles: list[_Settle]) -> list[None | BaseException]:
        with translate_db_errors("settling detail pages"):
            async with self.engine.begin() as conn:
                await self.settle_in(conn, settles)
        self.settled(item for item, _ in settles)
        return [None] * len(settles)

    async def settle_in(self, conn: AsyncConnection, settles: Sequence[_Settle]) -> None:
        """Settle ``(item, error)`` pairs (as :meth:`settle`) in the caller's transaction on ``conn``,
        one statement; call :meth:`settled` with their items once it has committed."""
        now = datetime.now(UTC)
        params = [{"b_item": item, "b_status": "stored" if error is None else "failed", "b_error": error, "b_at": now}
                  for item, error in settles]
        params.sort(key=_settle_order)  # stable: an item settled twice keeps its order
        await conn.execute(self._settle_stmt, params)

    def settled(self, items: Iterable[str]) -> None:
        """``items``' settles are committed (:meth:`settle_in`): the owners of the runs they end are woken."""
        self._settled_here(items)

    # -- the in-process hints ---------------------------------------------------------------------

    def _watch(self, run: RunKey, items: Iterable[str]) -> None:
        if len(self._waiting) >= _WATCHED:  # bounded: forgotten, the owners poll as before
            self._waiting.clear()
            self._items.clear()
        waiting = self._items.setdefault(run, set())
        for item in items:
            self._waiting.setdefault(item, set()).add(run)
            waiting.add(item)
        self._ready.discard(run)

    def _settled_here(self, items: Iterable[str], runs: Iterable[RunKey] | None = None) -> None:
        """``items``' pages are settled (or, for ``runs`` only, no longer waited for): the runs left with
        none known here are ready, and their owners woken."""
        only = None if runs is None else set(runs)
        for item in items:
            waiting = self._waiting.get(item)
            if not waiting:
                continue
            for run in list(waiting) if only is None else [r for r in only if r in waiting]:
                waiting.discard(run)
                left = self._items.get(run)
                if left is None:
                    continue
                left.discard(item)
                if not left:
                    del self._items[run]
                    self._ready.add(run)
                    wake = self._wakes.get(run)
                    if wake is not None:
                        wake.set()
            if not waiting:
                del self._waiting[item]

    async def wait(self, job: JobMessage, timeout: float) -> None:
        """Wait ``timeout`` seconds, or less: until every page of ``job``'s run that this process knows of
        is settled by this process (then check :meth:`out`: pages known elsewhere may still be out)."""
        run = (job.target_id, job.slot_at)
        if run in self._ready:
            self._ready.discard(run)
            await asyncio.sleep(0)
            return
        wake = self._wakes.setdefault(run, asyncio.Event())
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await wake.wait()
        finally:
            self._wakes.pop(run, None)
            self._ready.discard(run)

    def forget_run(self, job: JobMessage) -> None:
        """``job``'s run is finished here: its hints go."""
        run = (job.target_id, job.slot_at)
        self._ready.discard(run)
        for item in self._items.pop(run, ()):
            waiting = self._waiting.get(item)
            if waiting is not None:
                waiting.discard(run)
                if not waiting:
                    del self._waiting[item]

    async def out(self, job: JobMessage) -> int:
        """How many of ``job``'s run's detail pages are still out: read with the counts of the other runs
        whose owners ask meanwhile (one query for all, see :func:`~crawlherd.worker.completion.next_poll`)."""
        if self._outs is None:
            self._outs = Batcher(self._count_out, max_batch=500, name="crawlherd-detail-outs")
        return await self._outs((job.target_id, job.slot_at))

    async def _count_out(self, runs: list[RunKey]) -> list[int | BaseException]:
        with translate_db_errors("counting runs' detail pages"):
            async with self.engine.connect() as conn:
                rows = await conn.execute(
                    select(JobDetail.target_id, JobDetail.slot_at, func.count())
                    .where(JobDetail.target_id.in_({t for t, _ in runs}), JobDetail.slot_at.in_({s for _, s in runs}),
                           JobDetail.status == "out")
                    .group_by(JobDetail.target_id, JobDetail.slot_at)
                )
                counts = {(t, s): int(n) for t, s, n in rows}
        return [counts.get(run, 0) for run in runs]

    async def give_up(self, job: JobMessage, reason: str) -> int:
        """Fail ``job``'s run's pages still out with ``reason`` (they made no progress); how many."""
        with translate_db_errors("settling a run's detail pages"):
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    update(JobDetail)
                    .where(JobDetail.target_id == job.target_id, JobDetail.slot_at == job.slot_at,
                           JobDetail.status == "out")
                    .values(status="failed", error=reason, updated_at=datetime.now(UTC))
                )
                return int(result.rowcount or 0)

    async def done(self, job: JobMessage) -> int:
        """The run succeeded: drop its stored rows (failed ones stay, with their reasons, for ``explain``);
        how many failed."""
        key = (JobDetail.target_id == job.target_id) & (JobDetail.slot_at == job.slot_at)
        with translate_db_errors("clearing a run's detail pages"):
            async with self.engine.begin() as conn:
                await conn.execute(delete(JobDetail).where(key, JobDetail.status == "stored"))
                return int((await conn.execute(select(func.count()).select_from(JobDetail).where(
                    key, JobDetail.status == "failed"))).scalar_one())

    async def close(self) -> None:
        for batcher in (self._settles, self._outs, self._forgets):
            if batcher is not None:
                await batcher.close()
        self._settles = self._outs = self._forgets = None
