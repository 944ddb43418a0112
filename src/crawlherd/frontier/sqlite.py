"""``sqlite:///path/to/crawl.db``: a frontier in one SQLite file that survives its process.

Everything is persisted: the queue (with priorities, FIFO order and not-before times), the leases,
per-host state (ready time, policy overrides), the counters and the duplicate filter. The file is
opened in WAL mode; every public call is written in **one transaction** (a batch call --
``enqueue_requests``, ``next_requests``, ``ack_many`` -- writes its whole batch in one), committed before
the call returns; the enqueues, acks and fails called in one turn of the event loop share one
(:mod:`crawlherd.frontier._sqlite_turn`).
With ``synchronous=normal`` (the default) a commit is a write into the WAL, not an fsync: a process
killed with ``kill -9`` loses nothing that a call returned; a power cut may lose the last commits
(``synchronous=full`` fsyncs every commit).

One process owns the file at a time (an exclusive lock on ``<path>.lock``; a second opener gets
:class:`~crawlherd.errors.BackendUnavailableError`). So when the file is opened, any lease found in it
belongs to a process that is gone: **leases come back at open**, immediately (counted in
``expired_leases``), not after ``lease_timeout``. While the frontier is open, an unsettled lease
expires after ``lease_timeout`` as in every backend.

The scheduling decisions are made on the in-process host-aware heap index the memory backend uses
too (:mod:`crawlherd.frontier._index`), holding request ids, rebuilt from the file at open. A
request's record (JSON of
:meth:`Request.to_record`, with its version field) is read back when it is leased.
A record that cannot be read is moved to the ``bad`` table with its reason and logged.

The duplicate filter (exact or Bloom, :mod:`crawlherd.frontier.dupefilter`) lives in memory; it is
persisted as a snapshot of its bytes plus a log of the fingerprints added since (one row per new
request, in the same transaction as the request). The log is folded into a new snapshot every
``snapshot_every`` additions and at close.

Options of this backend: ``synchronous`` (``normal`` | ``full``), ``snapshot_every`` (default 100000).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from crawlherd import _json
from crawlherd.errors import ConfigurationError, FrontierError, LeaseError
from crawlherd.frontier._index import Held, HostIndex, HostSlot
from crawlherd.frontier._sqlite_file import (
    COUNTERS,
    SQLiteOptions,
    load,
    open_file,
    queued_by_host,
    save_counters,
    save_policy,
    snapshot,
    sqlite_errors,
)
from crawlherd.frontier._sqlite_turn import TurnWrites
from crawlherd.frontier.base import FrontierStats, Lease
from crawlherd.frontier.options import FrontierOptions, HostPolicy
from crawlherd.request import Request

__all__ = ["SQLiteFrontier"]

log = logging.getLogger(__name__)

_Host = HostSlot[int]


class SQLiteFrontier(TurnWrites):
    """A persistent frontier in one SQLite file; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: FrontierOptions | None = None,
        *,
        synchronous: str = "normal",
        snapshot_every: int = 100_000,
    ) -> None:
        own = SQLiteOptions(synchronous=str(synchronous).lower(), snapshot_every=snapshot_every)  # type: ignore[arg-type]
        self.options = options or FrontierOptions()
        self.path = Path(path)
        self._synchronous = own.synchronous.upper()
        self._snapshot_every = own.snapshot_every
        self._clock = self.options.clock
        self._db: sqlite3.Connection | None = None
        self._lock_file: IO[bytes] | None = None
        self._closed = False
        self._changed: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._turn = []
        self._turn_handle = None
        self._lessees = []
        self._lease_handle = None
        self._givebacks = set()
        self._index: HostIndex[int]

    @classmethod
    def from_url(cls, url: str = "sqlite:///crawlherd-frontier.db", **options: Any) -> SQLiteFrontier:
        opts, own = FrontierOptions.build(url, options, extra={"synchronous": str, "snapshot_every": int})
        parts = urlsplit(url)
        path = unquote(parts.path)[1:] if parts.path.startswith("/") else unquote(parts.path)
        if parts.netloc or not path or path == ":memory:":
            raise ConfigurationError(
                f"sqlite frontier URL {url!r} needs a file: sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        return cls(path, opts, **own)

    async def __aenter__(self) -> SQLiteFrontier:
        self._open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<SQLiteFrontier {self.path}>"

    # -- opening -----------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if self._closed:
            raise FrontierError(f"the sqlite frontier {self.path} is closed")
        db, lock = open_file(self.path, self._synchronous)
        try:
            with sqlite_errors(self.path):
                self._load(db)
        except BaseException:
            db.close()
            lock.close()
            raise
        self._db, self._lock_file = db, lock
        return db

    def _load(self, db: sqlite3.Connection) -> None:
        loaded = load(db, self.path, self.options, self._clock)
        self._counts = loaded.counts
        self._seen = loaded.seen
        self._logged = loaded.logged
        self._index = loaded.index
        self._robots_hosts = loaded.robots_hosts
        self._tokens = loaded.tokens
        self._token_base = loaded.token_base

    # -- transactions ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; the counters changed in it are saved with it, or, when it fails (a full
        disk), are as they were before it."""
        db = self._open()
        counts = dict(self._counts)
        with sqlite_errors(self.path):
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                save_counters(db, self._counts)
                db.execute("COMMIT")
            except BaseException:
                self._counts = counts
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _snapshot(self, db: sqlite3.Connection) -> None:
        snapshot(db, self._seen)
        self._logged = 0

    # -- enqueue (and ack, fail: frontier/_sqlite_turn.py) -------------------------------------------

    async def enqueue_robots(self, request: Request) -> bool:
        self._open()
        host = request.host
        if host in self._robots_hosts:
            return False
        now = self._clock.now()
        seq = self._index.next_seq(now)
        record = _json.dumps(request.to_record(fingerprint=True))
        with self._tx() as db:
            db.execute(
                "INSERT INTO requests (id, host, priority, seq, not_before, enqueued_at, record) "
                "VALUES (?, ?, ?, ?, NULL, ?, ?)",
                (seq, host, request.priority, seq, now, record),
            )
            db.execute("INSERT OR REPLACE INTO robots (host, id) VALUES (?, ?)", (host, seq))
            self._counts["enqueued"] += 1
        self._robots_hosts.add(host)
        self._index.add_robots(seq, host, request.priority, seq, now)
        self._notify()
        return True

    # -- lease -------------------------------------------------------------------------------------

    async def next_request(self) -> Lease | None:
        """One lease, or None; the calls of one loop turn are leased in one transaction."""
        self._open()
        if not self._index.ready and not self._index.due(self._clock.now()):
            return None  # nothing to hand out: no transaction for a look (waiting slots look often)
        return await self._lease_in_turn()

    async def next_requests(self, limit: int) -> list[Lease]:
        return self._lease_now(limit)

    def _lease_now(self, limit: int) -> list[Lease]:
        out: list[Lease] = []
        while len(out) < limit:
            got, buried = self._lease_batch(limit - len(out))
            out.extend(got)
            if not buried:
                break
        if out:
            self._room_made()
        return out

    def _lease_batch(self, limit: int) -> tuple[list[Lease], int]:
        self._open()
        now = self._clock.now()
        if not self._index.ready and not self._index.due(now):
            return [], 0  # nothing to hand out: no write transaction for a look (waiting slots look often)
        expires = now + self.options.lease_timeout
        picked: list[tuple[int, _Host, int, str, bool]] = []
        try:
            return self._lease_picked(picked, limit, now, expires)
        except BaseException:
            self._put_back(picked, now)
            raise

    def _lease_picked(
        self, picked: list[tuple[int, _Host, int, str, bool]], limit: int, now: float, expires: float
    ) -> tuple[list[Lease], int]:
        """Lease up to ``limit`` requests in one transaction; what it takes from the index goes to
        ``picked`` as it goes (for :meth:`_put_back` should the transaction fail)."""
        index = self._index
        # Expired leases come back in memory (and are counted) whether the transaction below commits or
        # not; their rows follow in it (a failed one leaves stale lease rows, replaced when leased again).
        expired = index.refresh(now) if index.due(now) else []
        self._counts["expired"] += len(expired)
        with self._tx() as db:
            if expired:
                db.executemany(
                    "UPDATE requests SET seq = ?, enqueued_at = ? WHERE id = ?",
                    [(seq, now, held.payload) for held, seq in expired],
                )
                db.executemany("DELETE FROM leases WHERE id = ?", [(held.payload,) for held, _ in expired])
            host_rows: list[tuple[str, float]] = []
            while len(picked) < limit:
                popped = index.pop(now)
                if popped is None:
                    break
                h, prio, rid, robots = popped
                if h.delay:
                    host_rows.append((h.name, h.ready_at))
                picked.append((rid, h, prio, f"{self._token_base}.{next(self._tokens)}", robots))
            if not picked:
                return [], 0
            # OR REPLACE: see the expired leases above
            db.executemany(
                "INSERT OR REPLACE INTO leases (id, token) VALUES (?, ?)",
                [(rid, token) for rid, _, _, token, _ in picked],
            )
            if host_rows:
                db.executemany(
                    "INSERT INTO hosts (host, ready_at) VALUES (?, ?) "
                    "ON CONFLICT (host) DO UPDATE SET ready_at = excluded.ready_at",
                    host_rows,
                )
            leases, buried = self._hand_out(db, picked, now, expires)
        for h, robots in buried:  # committed: their hosts may go on
            index.release(h, now, robots)
        if buried:
            self._notify()
        return leases, len(buried)

    def _put_back(self, picked: list[tuple[int, _Host, int, str, bool]], now: float) -> None:
        """A lease transaction failed (a full disk) and changed nothing in the file: the requests it
        took from the index go back to their queues (under new sequence numbers), none leased."""
        index = self._index
        for rid, h, prio, token, robots in picked:
            if index.take(token) is None:
                h.in_flight -= 1  # popped, not yet held
            index.requeue(Held(rid, h, prio, now, robots), index.next_seq(now), now, 0.0)
        if picked:
            self._notify()

    def _hand_out(
        self, db: sqlite3.Connection, picked: list[tuple[int, _Host, int, str, bool]], now: float, expires: float
    ) -> tuple[list[Lease], list[tuple[_Host, bool]]]:
        """The leases of the ``picked`` requests (read from their rows), and the (host, robots) of those
        that could not be read (moved to table ``bad``; to release once committed)."""
        index = self._index
        records: dict[int, tuple[str, int]] = {}
        ids = [rid for rid, _, _, _, _ in picked]
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            for rid, record, attempts in db.execute(
                f"SELECT id, record, attempts FROM requests WHERE id IN ({marks})", part
            ):
                records[rid] = (record, attempts)
        out: list[Lease] = []
        buried: list[tuple[_Host, bool]] = []
        for rid, h, prio, token, robots in picked:
            record, attempts = records.get(rid, ("", 0))
            try:
                if not record:
                    raise ValueError("the request's row is missing")
                request = Request.from_record(_json.loads(record), host=h.name)
            except (ValueError, KeyError, TypeError) as exc:
                self._bury(db, rid, h, robots, record, f"undecodable request record: {exc}")
                buried.append((h, robots))
                continue
            index.hold(token, Held(rid, h, prio, expires, robots))
            out.append(Lease(token, request, expires, attempts + 1))
        return out, buried

    def _bury(self, db: sqlite3.Connection, rid: int, h: _Host, robots: bool, record: str, reason: str) -> None:
        """Move a request whose record cannot be read to table ``bad`` (its host released by the caller,
        once committed)."""
        log.warning("sqlite frontier %s: moved request %d aside to table bad: %s", self.path, rid, reason)
        db.execute("INSERT OR REPLACE INTO bad VALUES (?, ?, ?)", (rid, reason, record))
        db.execute("DELETE FROM requests WHERE id = ?", (rid,))
        db.execute("DELETE FROM leases WHERE id = ?", (rid,))
        self._counts["bad"] += 1
        if robots:
            db.execute("UPDATE robots SET id = NULL WHERE host = ?", (h.name,))

    async def _pending_and_wakeup(self) -> tuple[bool, float | None]:
        self._open()
        return self._index.busy(), self._index.next_wakeup()

    # -- settle ------------------------------------------------------------------------------------

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        self._open()
        index = self._index
        held = index.leases.get(lease.token)
        if held is None:
            raise LeaseError(f"lease {lease.token} for {lease.request.url} is unknown, expired or settled")
        now = self._clock.now()
        seq = index.next_seq(now)
        with self._tx() as db:
            db.execute(
                "UPDATE requests SET seq = ?, not_before = ?, enqueued_at = ?, attempts = ? WHERE id = ?",
                (seq, now + delay if delay > 0 else None, now, lease.attempt, held.payload),
            )
            db.execute("DELETE FROM leases WHERE id = ?", (held.payload,))
            self._counts["retries"] += 1
        index.take(lease.token)
        index.requeue(held, seq, now, delay)
        self._notify()

    # -- politeness --------------------------------------------------------------------------------

    async def block_host(self, host: str, until: float) -> None:
        self._open()
        if until > self._index.host(host).ready_at:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO hosts (host, ready_at) VALUES (?, ?) "
                    "ON CONFLICT (host) DO UPDATE SET ready_at = excluded.ready_at",
                    (host, until),
                )
        self._index.block(host, until, self._clock.now())
        self._notify()

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        self._open()
        index = self._index
        policy = index.policies.get(host, HostPolicy()).updated(host, delay=delay, max_in_flight=max_in_flight)
        if index.policies.get(host) == policy:
            return  # as it is (a worker sets its websites' policies again on every listing page)
        with self._tx() as db:
            save_policy(db, host, policy)
        index.set_policy(host, policy, self._clock.now())
        self._notify()

    # -- introspection -----------------------------------------------------------------------------

    async def has_pending_requests(self) -> bool:
        self._open()
        return self._index.busy()

    async def idle(self) -> bool:
        return not await self.has_pending_requests()

    async def size(self) -> int:
        self._open()
        return self._index.queued

    async def stats(self) -> FrontierStats:
        db = self._open()
        now = self._clock.now()
        with sqlite_errors(self.path):
            depth, oldest = queued_by_host(db)
        return FrontierStats.from_counters(
            self._counts,
            queued=self._index.queued,
            in_flight=len(self._index.leases),
            oldest_queued_age=None if oldest is None else max(0.0, now - oldest),
            hosts=depth,
            host_states=self._index.states(now),
        )

    async def bad_entries(self) -> dict[str, str]:
        """Entries moved aside: id -> ``"<reason>\\t<record>"``."""
        db = self._open()
        with sqlite_errors(self.path):
            return {str(rid): f"{reason}\t{record}" for rid, reason, record in db.execute("SELECT * FROM bad")}

    async def purge(self) -> int:
        """Delete every request, lease, host state, counter and the duplicate filter; returns how many
        requests were deleted."""
        db = self._open()
        with self._tx() as tx:
            n = int(tx.execute("DELETE FROM requests").rowcount)
            for table in ("leases", "hosts", "dupefilter", "seen_log", "bad", "robots"):
                tx.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
            self._counts = dict.fromkeys(COUNTERS, 0)
        # reload the (now empty) in-memory index
        with sqlite_errors(self.path):
            self._load(db)
        self._notify()
        return n

    async def close(self) -> None:
        if not self._begin_close():
            return
        for task in self._givebacks:  # still failing to put a lease back: it expires in the file
            task.cancel()
        db = self._db
        if db is not None:
            try:
                self._flush_now()  # the enqueues and settles of this turn
                if self._logged:
                    with self._tx() as tx:
                        self._snapshot(tx)
            finally:
                self._db = None
                db.close()
                if self._lock_file is not None:
                    self._lock_file.close()
                    self._lock_file = None
