"""The SQLite frontier's enqueues and settles: one transaction per event-loop turn (:class:`TurnWrites`).

A worker settles its pages and queues their links from many tasks at once: one transaction per call
(``BEGIN IMMEDIATE``, the rows, the counters, ``COMMIT``) was most of the frontier's cost. Here every
enqueue and every ack or fail called in one turn of the event loop is written at the end of that turn
in one transaction (the counters saved once in it); each call returns once that transaction has
committed, with its own answer (how many were queued, which, or a :class:`~crawlherd.errors.LeaseError`
for its own unknown leases). Decisions are taken when the transaction is written, in call order: the
duplicate filter sees the requests of earlier calls of the turn, a lease settled twice in one turn is
settled once. Nothing changes in memory before the commit; a transaction that fails (a full disk)
fails every call of its turn, and changes nothing. A call whose caller is cancelled meanwhile is
written all the same (an ack stays an ack).

A frontier with a ``max_size`` queues a call's requests alone (each call may have to wait for room).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crawlherd import _json
from crawlherd._resilience import backoff_delay
from crawlherd.errors import BackendUnavailableError, LeaseError
from crawlherd.frontier._index import Held, HostIndex
from crawlherd.frontier._sqlite_file import signed
from crawlherd.frontier._waiting import WaitingMixin
from crawlherd.frontier.base import Lease
from crawlherd.frontier.dupefilter import BloomFilter, ExactFilter, fp_to_int
from crawlherd.frontier.options import FrontierOptions
from crawlherd.request import Request

__all__ = ["TurnWrites"]

log = logging.getLogger(__name__)


@dataclass
class _Enqueue:
    requests: list[Request]
    flags: list[bool] = field(default_factory=list)
    stopped: int | None = None  # where the queue was full (max_size)


@dataclass
class _Settle:
    leases: list[Lease]
    counter: str  # "acked" or "failures"
    held: list[Held[int]] = field(default_factory=list)  # what it ends, by token
    tokens: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # the URLs of its unknown leases


_Op = _Enqueue | _Settle


class TurnWrites(WaitingMixin):
    """The enqueue and settle calls of :class:`~crawlherd.frontier.sqlite.SQLiteFrontier` (a mixin:
    the frontier holds the state below); see the module docstring."""

    options: FrontierOptions
    _seen: ExactFilter | BloomFilter
    _logged: int
    _snapshot_every: int
    _index: HostIndex[int]
    _counts: dict[str, int]
    _turn: list[tuple[_Op, asyncio.Future[None]]]
    _turn_handle: asyncio.Handle | None
    _lessees: list[asyncio.Future[Lease | None]]
    _lease_handle: asyncio.Handle | None
    _givebacks: set[asyncio.Task[None]]

    # what the frontier provides
    _open: Callable[[], sqlite3.Connection]
    _tx: Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]
    _snapshot: Callable[[sqlite3.Connection], None]
    _lease_now: Callable[[int], list[Lease]]
    retry: Callable[[Lease, float], Awaitable[None]]

    # -- the calls ---------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        return await self.enqueue_requests([request]) == 1

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        return sum(await self.enqueue_many(list(requests)))

    async def enqueue_many(self, requests: Sequence[Request]) -> list[bool]:
        """See :meth:`~crawlherd.frontier.base.EnqueueMany.enqueue_many`."""
        self._open()
        flags: list[bool] = []
        pending = list(requests)
        while pending:
            op = _Enqueue(pending)
            await self._in_turn(op)
            flags += op.flags
            if op.stopped is None:
                break
            pending = pending[op.stopped :]
            await self._when_full(pending[0].url, len(pending) - 1, queued=self._index.queued)
        return flags

    async def ack(self, lease: Lease) -> None:
        await self.ack_many([lease])

    async def ack_many(self, leases: Iterable[Lease]) -> None:
        await self._settle_many(list(leases), "acked")

    async def fail(self, lease: Lease, reason: str) -> None:
        await self._settle_many([lease], "failures")

    async def _settle_many(self, batch: list[Lease], counter: str) -> None:
        """Ack or fail (``counter``) the leases of ``batch``: their requests go."""
        self._open()
        op = _Settle(batch, counter)
        await self._in_turn(op)
        if op.bad:
            raise LeaseError(f"lease(s) for {', '.join(op.bad)} unknown, expired or settled")

    # -- leases ------------------------------------------------------------------------------------

    async def _lease_in_turn(self) -> Lease | None:
        """A lease for this caller, leased with those of the other callers of this loop turn in one
        transaction. A caller cancelled once its lease is made gives it back."""
        loop = asyncio.get_running_loop()
        got: asyncio.Future[Lease | None] = loop.create_future()
        self._lessees.append(got)
        if self._lease_handle is None:
            self._lease_handle = loop.call_soon(self._lease_turn)
        try:
            return await got
        except asyncio.CancelledError:
            if got.done() and not got.cancelled() and got.exception() is None and (lease := got.result()):
                task = loop.create_task(self._give_back(lease), name="crawlherd-sqlite-give-back")
                self._givebacks.add(task)  # held until done (the loop keeps only a weak reference)
                task.add_done_callback(self._givebacks.discard)
            raise

    def _lease_turn(self) -> None:
        self._lease_handle = None
        waiting = [f for f in self._lessees if not f.done()]
        self._lessees = []
        if not waiting:
            return
        try:
            leases: list[Lease | None] = [*self._lease_now(len(waiting))]
        except Exception as exc:  # noqa: BLE001 - every caller of the turn fails with it
            for f in waiting:
                f.set_exception(exc)
            return
        leases += [None] * (len(waiting) - len(leases))
        for f, lease in zip(waiting, leases, strict=True):
            f.set_result(lease)

    async def _give_back(self, lease: Lease) -> None:
        """Put back a lease whose caller has gone. The file unwritable (a full disk): tried again with
        back-off until it is written or the frontier closes -- else the page would wait out its lease."""
        failures = 0
        while not self._closed:
            try:
                await self.retry(lease, 0.0)
                return
            except BackendUnavailableError:
                failures += 1
                await asyncio.sleep(backoff_delay(failures, base=0.1, cap=2.0))
            except Exception:  # noqa: BLE001 - settled or expired meanwhile: nothing to put back
                return

    # -- the turn ----------------------------------------------------------------------------------

    async def _in_turn(self, op: _Op) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._turn.append((op, done))
        if self._turn_handle is None:
            self._turn_handle = loop.call_soon(self._flush_turn)
        await asyncio.shield(done)  # a cancelled caller's call is written all the same

    def _flush_turn(self) -> None:
        """Write the calls of the turn in one transaction; answer each."""
        self._turn_handle = None
        turn, self._turn = self._turn, []
        if not turn:
            return
        try:
            self._write_turn([op for op, _ in turn])
        except Exception as exc:  # noqa: BLE001 - every call of the turn fails with it
            for _, done in turn:
                if not done.done():
                    done.set_exception(exc)
            return
        for _, done in turn:
            if not done.done():
                done.set_result(None)

    def _flush_now(self) -> None:
        """Write what the turn holds now (at close); the callers waiting for a lease get none."""
        if self._turn_handle is not None:
            self._turn_handle.cancel()
        self._flush_turn()
        if self._lease_handle is not None:
            self._lease_handle.cancel()
            self._lease_handle = None
        for waiting in self._lessees:
            if not waiting.done():
                waiting.set_result(None)
        self._lessees = []

    def _write_turn(self, ops: list[_Op]) -> None:
        now = self.options.clock.now()
        rows, fps, added, dups = self._take_new([op for op in ops if isinstance(op, _Enqueue)], now)
        settles = [op for op in ops if isinstance(op, _Settle)]
        gone = self._held_of(settles)
        with self._tx() as db:  # failing, it counts nothing
            if rows:
                db.executemany(
                    "INSERT INTO requests (id, host, priority, seq, not_before, enqueued_at, record) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                db.executemany("INSERT INTO seen_log (fp) VALUES (?)", fps)
            if gone:
                ids = [(h.payload,) for h in gone]
                db.executemany("DELETE FROM requests WHERE id = ?", ids)
                db.executemany("DELETE FROM leases WHERE id = ?", ids)
                robots_done = [(h.host.name,) for h in gone if h.robots]
                if robots_done:
                    db.executemany("UPDATE robots SET id = NULL WHERE host = ?", robots_done)
            self._counts["duplicates"] += dups
            self._counts["enqueued"] += len(added)
            for op in settles:
                self._counts[op.counter] += len(op.held)
        # committed: now the memory
        self._applied(added, settles, now)

    def _take_new(
        self, ops: list[_Enqueue], now: float
    ) -> tuple[list[tuple[Any, ...]], list[tuple[int]], list[tuple[Request, int, int]], int]:
        """The rows of the requests of ``ops`` that the duplicate filter lets through (and, with a
        ``max_size``, the queue has room for); each op's flags. (rows, fingerprints, added, duplicates)."""
        max_size = self.options.max_size
        seen, index = self._seen, self._index
        rows: list[tuple[Any, ...]] = []
        fps: list[tuple[int]] = []
        added: list[tuple[Request, int, int]] = []
        batch_fps: set[int] = set()
        dups = 0
        for op in ops:
            for i, request in enumerate(op.requests):
                fp = fp_to_int(request.fingerprint)
                if fp in seen or fp in batch_fps:
                    op.flags.append(False)
                    dups += 1
                    continue
                if max_size and index.queued + len(added) >= max_size:
                    op.stopped = i
                    break
                op.flags.append(True)
                batch_fps.add(fp)
                seq = index.next_seq(now)
                record = _json.dumps(request.to_record(fingerprint=True))
                # the id is the first sequence number: unique, and above every id ever used in the file
                rows.append((seq, request.host, request.priority, seq, request.not_before, now, record))
                fps.append((signed(fp),))
                added.append((request, seq, fp))
        return rows, fps, added, dups

    def _held_of(self, settles: list[_Settle]) -> list[Held[int]]:
        """The held leases the settles of the turn end, each once; each op's unknown ones in ``bad``."""
        leases = self._index.leases
        taken: set[str] = set()
        out: list[Held[int]] = []
        for op in settles:
            for lease in op.leases:
                held = leases.get(lease.token)
                if held is None or lease.token in taken:
                    if held is None:
                        op.bad.append(lease.request.url)
                    continue
                taken.add(lease.token)
                op.tokens.append(lease.token)
                op.held.append(held)
                out.append(held)
        return out

    def _applied(self, added: list[tuple[Request, int, int]], settles: list[_Settle], now: float) -> None:
        """The committed turn in memory: the new requests queued and filtered, the settled leases gone."""
        index, seen = self._index, self._seen
        self._logged += len(added)
        for _, _, fp in added:
            seen.add(fp)
        for request, rid, _ in added:
            index.add(rid, request.host, request.priority, rid, request.not_before, now)
        settled = False
        for op in settles:
            for token in op.tokens:
                taken = index.take(token)
                if taken is not None:
                    index.settled(taken.host, now, taken.robots)
                    settled = True
        if added or settled:
            self._notify()
        if self._logged >= self._snapshot_every:
            self._try_snapshot()

    def _try_snapshot(self) -> None:
        """Fold the duplicate filter's log into a new snapshot. It is an economy, not a write anyone waits
        for: one that fails (a full disk) is logged and tried again after the next turn that adds."""
        try:
            with self._tx() as db:
                self._snapshot(db)
        except BackendUnavailableError as exc:
            log.warning("%s; the duplicate filter's snapshot is written later", exc)

