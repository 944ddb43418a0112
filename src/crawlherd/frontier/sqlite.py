"""``sqlite:///path/to/crawl.db``: a frontier in one SQLite file that survives its process.

Everything is persisted: the queue (with priorities, FIFO order and not-before times), the leases,
per-host state (ready time, policy overrides), the counters and the duplicate filter. The file is
opened in WAL mode; every public call is **one transaction** (a batch call -- ``enqueue_requests``,
``next_requests``, ``ack_many`` -- writes its whole batch in one), committed before the call returns.
With ``synchronous=normal`` (the default) a commit is a write into the WAL, not an fsync: a process
killed with ``kill -9`` loses nothing that a call returned; a power cut may lose the last commits
(``synchronous=full`` fsyncs every commit).

One process owns the file at a time (an exclusive lock on ``<path>.lock``; a second opener gets
:class:`~crawlherd.errors.BackendUnavailableError`). So when the file is opened, any lease found in it
belongs to a process that is gone: **leases come back at open**, immediately (counted in
``expired_leases``), not after ``lease_timeout``. While the frontier is open, an unsettled lease
expires after ``lease_timeout`` as in every backend.

The scheduling decisions are made on an in-memory index (per-host heaps of ``(priority, seq, id)``,
a ready heap, timers -- the memory backend's algorithm), rebuilt from the file at open; a request's
record (JSON of :meth:`Request.to_record`, with its version field) is read back when it is leased.
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
import fcntl
import heapq
import itertools
import json
import logging
import os
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from crawlherd.errors import BackendUnavailableError, ConfigurationError, FrontierError, LeaseError, QueueFullError
from crawlherd.frontier._hosts import HostSlot, policy_of, schedule_host
from crawlherd.frontier._waiting import WaitingMixin
from crawlherd.frontier.base import FrontierStats, Lease
from crawlherd.frontier.dupefilter import BloomFilter, ExactFilter, fp_to_int, make_dupefilter
from crawlherd.frontier.options import FrontierOptions, HostPolicy
from crawlherd.request import Request

__all__ = ["SQLiteFrontier"]

log = logging.getLogger(__name__)

LAYOUT_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    priority INTEGER NOT NULL,
    seq INTEGER NOT NULL,            -- FIFO order among equal priorities
    not_before REAL,                 -- not handed out before (enqueue's not_before, retry's delay)
    enqueued_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    record TEXT NOT NULL             -- JSON of Request.to_record() (versioned)
);
-- Leases out. Apart from requests so that leasing appends to a small table instead of rewriting
-- request rows scattered over the file.
CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY, token TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    ready_at REAL NOT NULL DEFAULT 0,
    delay REAL,                      -- policy overrides, NULL: the frontier's default
    max_in_flight INTEGER
);
CREATE TABLE IF NOT EXISTS dupefilter (id INTEGER PRIMARY KEY CHECK (id = 1), kind TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS seen_log (fp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bad (id INTEGER PRIMARY KEY, reason TEXT NOT NULL, record TEXT NOT NULL);
"""

_COUNTERS = ("enqueued", "duplicates", "acked", "retries", "failures", "expired", "bad")


def _signed(fp: int) -> int:
    return fp - (1 << 64) if fp >= 1 << 63 else fp


def _unsigned(fp: int) -> int:
    return fp + (1 << 64) if fp < 0 else fp


@dataclass(slots=True)
class _Leased:
    id: int
    host: _Host
    priority: int
    expires_at: float


_Host = HostSlot[int]


class SQLiteFrontier(WaitingMixin):
    """A persistent frontier in one SQLite file; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: FrontierOptions | None = None,
        *,
        synchronous: str = "normal",
        snapshot_every: int = 100_000,
    ) -> None:
        if str(synchronous).lower() not in ("normal", "full"):
            raise ConfigurationError(f"synchronous={synchronous!r}: use 'normal' or 'full'")
        if snapshot_every < 1:
            raise ConfigurationError(f"snapshot_every={snapshot_every!r} must be >= 1")
        self.options = options or FrontierOptions()
        self.path = Path(path)
        self._synchronous = str(synchronous).upper()
        self._snapshot_every = snapshot_every
        self._clock = self.options.clock
        self._db: sqlite3.Connection | None = None
        self._lock_file: IO[bytes] | None = None
        self._closed = False
        self._changed: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None

    @classmethod
    def from_url(cls, url: str = "sqlite:///crawlherd-frontier.db", **options: Any) -> SQLiteFrontier:
        opts, own = FrontierOptions.build(url, options, extra=("synchronous", "snapshot_every"))
        parts = urlsplit(url)
        path = unquote(parts.path)[1:] if parts.path.startswith("/") else unquote(parts.path)
        if parts.netloc or not path or path == ":memory:":
            raise ConfigurationError(
                f"sqlite frontier URL {url!r} needs a file: sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        try:
            every = int(own.get("snapshot_every", 100_000))
        except ValueError:
            raise ConfigurationError(f"snapshot_every={own['snapshot_every']!r} is not an integer") from None
        return cls(path, opts, synchronous=str(own.get("synchronous", "normal")), snapshot_every=every)

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
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(f"{self.path}.lock", "ab")  # noqa: SIM115 - held for the frontier's lifetime
        except OSError as exc:
            raise BackendUnavailableError(f"cannot open sqlite frontier {self.path}: {exc}", backend="sqlite") from exc
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise BackendUnavailableError(
                f"sqlite frontier {self.path} is open in another process (or another frontier object)",
                backend="sqlite",
            ) from None
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self._synchronous}")
            db.executescript(_SCHEMA)
            self._db = db
            self._lock_file = lock
            self._load(db)
        except sqlite3.Error as exc:
            lock.close()
            self._db = None
            raise BackendUnavailableError(f"cannot open sqlite frontier {self.path}: {exc}", backend="sqlite") from exc
        except BaseException:
            lock.close()
            self._db = None
            raise
        return db

    def _load(self, db: sqlite3.Connection) -> None:
        opts = self.options
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        layout = int(meta.get("layout", LAYOUT_VERSION))
        if layout != LAYOUT_VERSION:
            raise ConfigurationError(f"{self.path} uses frontier layout {layout}; this version reads {LAYOUT_VERSION}")
        kind = meta.get("dupefilter", opts.dupefilter)
        if kind != opts.dupefilter:
            raise ConfigurationError(
                f"{self.path} was created with dupefilter={kind!r}, not {opts.dupefilter!r}; open it with "
                f"dupefilter={kind!r}"
            )
        counters = json.loads(meta.get("counters", "{}"))
        self._counts = {name: int(counters.get(name, 0)) for name in _COUNTERS}

        # duplicate filter: snapshot + log
        row = db.execute("SELECT kind, data FROM dupefilter WHERE id = 1").fetchone()
        self._seen: ExactFilter | BloomFilter
        if row is None:
            self._seen = make_dupefilter(opts.dupefilter, capacity=opts.capacity, error_rate=opts.error_rate)
        elif row[0] == "exact":
            self._seen = ExactFilter.from_bytes(row[1])
        else:
            self._seen = BloomFilter.from_bytes(row[1])
        self._logged = 0
        for (fp,) in db.execute("SELECT fp FROM seen_log"):
            self._seen.add(_unsigned(fp))
            self._logged += 1

        # hosts and policies
        self._policies: dict[str, HostPolicy] = {}
        self._ready_at: dict[str, float] = {}
        for host, ready_at, delay, cap in db.execute("SELECT host, ready_at, delay, max_in_flight FROM hosts"):
            if delay is not None or cap is not None:
                self._policies[host] = HostPolicy(delay=delay, max_in_flight=cap)
            self._ready_at[host] = ready_at
        for host, policy in opts.host_policies.items():
            self._policies[host] = policy
        self._hosts: dict[str, _Host] = {}
        self._ready: list[tuple[int, int, str]] = []
        self._timers: list[tuple[float, str]] = []
        self._delayed: list[tuple[float, int, int, str, int]] = []  # (at, seq, id, host, priority)
        self._leases: OrderedDict[str, _Leased] = OrderedDict()
        self._tokens = itertools.count(1)
        self._queued = 0

        now = self._clock.now()
        top = db.execute("SELECT MAX(COALESCE(MAX(seq), 0), COALESCE(MAX(id), 0)) FROM requests").fetchone()[0]
        self._seq = itertools.count(top + 1)
        self._token_base = f"{os.getpid()}.{int(now * 1000)}"

        # Leases in the file belong to a process that is gone (the lock says so): they come back now.
        reclaimed = db.execute("SELECT r.id FROM leases l JOIN requests r ON r.id = l.id ORDER BY r.seq").fetchall()
        db.execute("BEGIN IMMEDIATE")
        if reclaimed:
            db.executemany(
                "UPDATE requests SET seq = ?, enqueued_at = ? WHERE id = ?",
                [(next(self._seq), now, rid) for (rid,) in reclaimed],
            )
        db.execute("DELETE FROM leases")
        if reclaimed:
            self._counts["expired"] += len(reclaimed)
            log.info(
                "sqlite frontier %s: %d lease(s) of a previous process returned to the queue", self.path, len(reclaimed)
            )
        for host, policy in opts.host_policies.items():
            self._save_policy(db, host, policy)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('layout', ?), ('dupefilter', ?)", (LAYOUT_VERSION, kind))
        self._save_counters(db)
        db.execute("COMMIT")

        for rid, host, prio, seq, nb in db.execute("SELECT id, host, priority, seq, not_before FROM requests"):
            if nb is not None and nb > now:
                heapq.heappush(self._delayed, (nb, seq, rid, host, prio))
                self._queued += 1
            else:
                h = self._host(host)
                h.queue.append((-prio, seq, rid))
                self._queued += 1
        for h in self._hosts.values():
            heapq.heapify(h.queue)
            self._schedule(h, now)

    # -- transactions ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._open()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                self._save_counters(db)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise BackendUnavailableError(f"sqlite frontier {self.path}: {exc}", backend="sqlite") from exc

    def _save_counters(self, db: sqlite3.Connection) -> None:
        db.execute("INSERT OR REPLACE INTO meta VALUES ('counters', ?)", (json.dumps(self._counts),))

    def _save_policy(self, db: sqlite3.Connection, host: str, policy: HostPolicy) -> None:
        db.execute(
            "INSERT INTO hosts (host, delay, max_in_flight) VALUES (?, ?, ?) "
            "ON CONFLICT (host) DO UPDATE SET delay = excluded.delay, max_in_flight = excluded.max_in_flight",
            (host, policy.delay, policy.max_in_flight),
        )

    def _snapshot(self, db: sqlite3.Connection) -> None:
        kind = "exact" if isinstance(self._seen, ExactFilter) else "bloom"
        db.execute("INSERT OR REPLACE INTO dupefilter VALUES (1, ?, ?)", (kind, self._seen.to_bytes()))
        db.execute("DELETE FROM seen_log")
        self._logged = 0

    # -- hosts (the memory backend's algorithm, over request ids) -----------------------------------

    def _host(self, name: str) -> _Host:
        h = self._hosts.get(name)
        if h is None:
            h = self._hosts[name] = _Host(name, *self._policy(name))
            h.ready_at = self._ready_at.pop(name, 0.0)
        return h

    def _policy(self, name: str) -> tuple[float, int]:
        return policy_of(self.options, self._policies, name)

    def _schedule(self, h: _Host, now: float) -> None:
        schedule_host(h, now, self._ready, self._timers)

    def _refresh(self, db: sqlite3.Connection, now: float) -> None:
        leases = self._leases
        expired: list[tuple[int, float, int]] = []
        while leases:
            token = next(iter(leases))
            held = leases[token]
            if held.expires_at > now:
                break
            del leases[token]
            self._counts["expired"] += 1
            held.host.in_flight -= 1
            seq = next(self._seq)
            heapq.heappush(held.host.queue, (-held.priority, seq, held.id))
            self._queued += 1
            expired.append((seq, now, held.id))
            self._schedule(held.host, now)
        if expired:
            db.executemany("UPDATE requests SET seq = ?, enqueued_at = ? WHERE id = ?", expired)
            db.executemany("DELETE FROM leases WHERE id = ?", [(rid,) for _, _, rid in expired])
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, seq, rid, host, prio = heapq.heappop(delayed)
            h = self._host(host)
            heapq.heappush(h.queue, (-prio, seq, rid))
            self._schedule(h, now)
        timers = self._timers
        while timers and timers[0][0] <= now:
            at, name = heapq.heappop(timers)
            timed = self._hosts.get(name)
            if timed is not None and timed.timer_at == at:
                timed.timer_at = -1.0
                self._schedule(timed, now)

    def _due(self, now: float) -> bool:
        if self._timers and self._timers[0][0] <= now:
            return True
        if self._delayed and self._delayed[0][0] <= now:
            return True
        if self._leases:
            return self._leases[next(iter(self._leases))].expires_at <= now
        return False

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        return await self.enqueue_requests([request]) == 1

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        pending = list(requests)
        queued = 0
        while pending:
            n, stopped = self._enqueue_batch(pending)
            queued += n
            if stopped is None:
                break
            pending = pending[stopped:]
            if self.options.full_policy == "raise":
                raise QueueFullError(
                    f"frontier is full ({self._queued} >= max_size={self.options.max_size}); {pending[0].url} "
                    f"and the {len(pending) - 1} request(s) after it were not queued and may be enqueued again"
                )
            if self._room is None or self._room.done():
                self._room = asyncio.get_running_loop().create_future()
            await self._room
        return queued

    def _enqueue_batch(self, requests: list[Request]) -> tuple[int, int | None]:
        """Queue requests in one transaction; returns (queued, index where the queue was full or None)."""
        max_size = self.options.max_size
        seen = self._seen
        now = self._clock.now()
        rows: list[tuple[Any, ...]] = []
        fps: list[tuple[int]] = []
        added: list[tuple[Request, int, int, bool]] = []
        stopped: int | None = None
        dups = 0
        batch_fps: set[int] = set()
        for i, request in enumerate(requests):
            fp = fp_to_int(request.fingerprint)
            if fp in seen or fp in batch_fps:
                dups += 1
                continue
            if max_size and self._queued + len(added) >= max_size:
                stopped = i
                break
            batch_fps.add(fp)
            seq = next(self._seq)
            nb = request.not_before
            delayed = nb is not None and nb > now
            record = json.dumps(request.to_record(), separators=(",", ":"), ensure_ascii=False)
            # the id is the first sequence number: unique, and above every id ever used in the file
            rows.append((seq, request.host, request.priority, seq, nb, now, record))
            fps.append((_signed(fp),))
            added.append((request, seq, fp, delayed))
        with self._tx() as db:
            db.executemany(
                "INSERT INTO requests (id, host, priority, seq, not_before, enqueued_at, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.executemany("INSERT INTO seen_log (fp) VALUES (?)", fps)
            self._counts["duplicates"] += dups
            self._counts["enqueued"] += len(added)
        # committed: now the in-memory index
        self._logged += len(fps)
        for _, _, fp, _ in added:
            seen.add(fp)
        if self._logged >= self._snapshot_every:
            with self._tx() as db:
                self._snapshot(db)
        for request, rid, _, delayed in added:
            seq = rid
            self._queued += 1
            if delayed:
                assert request.not_before is not None
                heapq.heappush(self._delayed, (request.not_before, seq, rid, request.host, request.priority))
            else:
                h = self._host(request.host)
                heapq.heappush(h.queue, (-request.priority, seq, rid))
                self._schedule(h, now)
        if added:
            self._notify()
        return len(added), stopped

    # -- lease -------------------------------------------------------------------------------------

    async def next_request(self) -> Lease | None:
        leases = await self.next_requests(1)
        return leases[0] if leases else None

    async def next_requests(self, limit: int) -> list[Lease]:
        out: list[Lease] = []
        while len(out) < limit:
            got, buried = self._lease_batch(limit - len(out))
            out.extend(got)
            if not buried:
                break
        if out:
            room = self._room
            if room is not None and not room.done():
                room.set_result(None)
        return out

    def _lease_batch(self, limit: int) -> tuple[list[Lease], int]:
        now = self._clock.now()
        expires = now + self.options.lease_timeout
        with self._tx() as db:
            if self._due(now):
                self._refresh(db, now)
            picked: list[tuple[int, _Host, int, str]] = []
            ready = self._ready
            hosts = self._hosts
            host_rows: list[tuple[str, float]] = []
            while ready and len(picked) < limit:
                _, seq, name = heapq.heappop(ready)
                h = hosts.get(name)
                if h is None or h.ready_seq != seq:
                    continue
                h.ready_seq = -1
                if not h.queue or h.queue[0][1] != seq or h.in_flight >= h.max_in_flight or h.ready_at > now:
                    self._schedule(h, now)
                    continue
                negprio, _, rid = heapq.heappop(h.queue)
                self._queued -= 1
                h.in_flight += 1
                if h.delay:
                    h.ready_at = now + h.delay
                    host_rows.append((h.name, h.ready_at))
                if h.queue:
                    self._schedule(h, now)
                token = f"{self._token_base}.{next(self._tokens)}"
                picked.append((rid, h, -negprio, token))
            if not picked:
                return [], 0
            db.executemany(
                "INSERT INTO leases (id, token) VALUES (?, ?)",
                [(rid, token) for rid, _, _, token in picked],
            )
            if host_rows:
                db.executemany(
                    "INSERT INTO hosts (host, ready_at) VALUES (?, ?) "
                    "ON CONFLICT (host) DO UPDATE SET ready_at = excluded.ready_at",
                    host_rows,
                )
            records: dict[int, tuple[str, int]] = {}
            ids = [rid for rid, _, _, _ in picked]
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = ",".join("?" * len(part))
                for rid, record, attempts in db.execute(
                    f"SELECT id, record, attempts FROM requests WHERE id IN ({marks})", part
                ):
                    records[rid] = (record, attempts)
            out: list[Lease] = []
            buried = 0
            for rid, h, prio, token in picked:
                record, attempts = records.get(rid, ("", 0))
                try:
                    if not record:
                        raise ValueError("the request's row is missing")
                    request = Request.from_record(json.loads(record))
                except (ValueError, KeyError, TypeError) as exc:
                    reason = f"undecodable request record: {exc}"
                    log.warning("sqlite frontier %s: moved request %d aside to table bad: %s", self.path, rid, reason)
                    db.execute("INSERT OR REPLACE INTO bad VALUES (?, ?, ?)", (rid, reason, record))
                    db.execute("DELETE FROM requests WHERE id = ?", (rid,))
                    db.execute("DELETE FROM leases WHERE id = ?", (rid,))
                    self._counts["bad"] += 1
                    h.in_flight -= 1
                    self._after_settle(h, now)
                    buried += 1
                    continue
                self._leases[token] = _Leased(rid, h, prio, expires)
                out.append(Lease(token, request, expires, attempts + 1))
            return out, buried

    async def _pending_and_wakeup(self) -> tuple[bool, float | None]:
        return bool(self._queued or self._leases), self._next_wakeup()

    def _next_wakeup(self) -> float | None:
        times = []
        if self._timers:
            times.append(self._timers[0][0])
        if self._delayed:
            times.append(self._delayed[0][0])
        if self._leases:
            times.append(self._leases[next(iter(self._leases))].expires_at)
        return min(times) if times else None

    # -- settle ------------------------------------------------------------------------------------

    def _take(self, lease: Lease) -> _Leased:
        held = self._leases.get(lease.token)
        if held is None:
            raise LeaseError(f"lease {lease.token} for {lease.request.url} is unknown, expired or settled")
        return held

    def _after_settle(self, h: _Host, now: float) -> None:
        if h.queue:
            self._schedule(h, now)
        elif not h.in_flight and h.ready_at <= now:
            del self._hosts[h.name]
        self._notify()

    async def ack(self, lease: Lease) -> None:
        await self.ack_many([lease])

    async def ack_many(self, leases: Iterable[Lease]) -> None:
        self._open()
        batch = list(leases)
        held = [self._leases.get(lease.token) for lease in batch]
        valid = [h for h in held if h is not None]
        if valid:
            now = self._clock.now()
            with self._tx() as db:
                gone = [(h.id,) for h in valid]
                db.executemany("DELETE FROM requests WHERE id = ?", gone)
                db.executemany("DELETE FROM leases WHERE id = ?", gone)
                self._counts["acked"] += len(valid)
            for lease, h in zip(batch, held, strict=True):
                if h is not None:
                    del self._leases[lease.token]
                    h.host.in_flight -= 1
                    self._after_settle(h.host, now)
        bad = [lease.request.url for lease, h in zip(batch, held, strict=True) if h is None]
        if bad:
            raise LeaseError(f"lease(s) for {', '.join(bad)} unknown, expired or settled")

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        self._open()
        held = self._take(lease)
        now = self._clock.now()
        seq = next(self._seq)
        later = delay > 0
        with self._tx() as db:
            db.execute(
                "UPDATE requests SET seq = ?, not_before = ?, enqueued_at = ?, attempts = ? WHERE id = ?",
                (seq, now + delay if later else None, now, lease.attempt, held.id),
            )
            db.execute("DELETE FROM leases WHERE id = ?", (held.id,))
            self._counts["retries"] += 1
        del self._leases[lease.token]
        h = held.host
        h.in_flight -= 1
        self._queued += 1
        if later:
            heapq.heappush(self._delayed, (now + delay, seq, held.id, h.name, held.priority))
        else:
            heapq.heappush(h.queue, (-held.priority, seq, held.id))
        self._after_settle(h, now)

    async def fail(self, lease: Lease, reason: str) -> None:
        self._open()
        held = self._take(lease)
        with self._tx() as db:
            db.execute("DELETE FROM requests WHERE id = ?", (held.id,))
            db.execute("DELETE FROM leases WHERE id = ?", (held.id,))
            self._counts["failures"] += 1
        del self._leases[lease.token]
        held.host.in_flight -= 1
        self._after_settle(held.host, self._clock.now())

    # -- politeness --------------------------------------------------------------------------------

    async def block_host(self, host: str, until: float) -> None:
        self._open()
        h = self._host(host)
        if until > h.ready_at:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO hosts (host, ready_at) VALUES (?, ?) "
                    "ON CONFLICT (host) DO UPDATE SET ready_at = excluded.ready_at",
                    (host, until),
                )
            h.ready_at = until
        self._schedule(h, self._clock.now())
        self._notify()

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        if delay is not None and delay < 0:
            raise ConfigurationError(f"delay={delay!r} for {host}: must be >= 0 seconds")
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigurationError(f"max_in_flight={max_in_flight!r} for {host}: must be >= 1")
        self._open()
        old = self._policies.get(host, HostPolicy())
        policy = HostPolicy(
            delay=old.delay if delay is None else delay,
            max_in_flight=old.max_in_flight if max_in_flight is None else max_in_flight,
        )
        with self._tx() as db:
            self._save_policy(db, host, policy)
        self._policies[host] = policy
        h = self._hosts.get(host)
        if h is not None:
            h.delay, h.max_in_flight = self._policy(host)
            self._schedule(h, self._clock.now())
        self._notify()

    # -- introspection -----------------------------------------------------------------------------

    async def has_pending_requests(self) -> bool:
        self._open()
        return bool(self._queued or self._leases)

    async def idle(self) -> bool:
        return not await self.has_pending_requests()

    async def size(self) -> int:
        self._open()
        return self._queued

    async def stats(self) -> FrontierStats:
        db = self._open()
        now = self._clock.now()
        try:
            depth = dict(
                db.execute(
                    "SELECT host, COUNT(*) FROM requests WHERE id NOT IN (SELECT id FROM leases) GROUP BY host"
                ).fetchall()
            )
            oldest = db.execute(
                "SELECT MIN(enqueued_at) FROM requests WHERE id NOT IN (SELECT id FROM leases)"
            ).fetchone()[0]
        except sqlite3.Error as exc:
            raise BackendUnavailableError(f"sqlite frontier {self.path}: {exc}", backend="sqlite") from exc
        c = self._counts
        return FrontierStats(
            queued=self._queued,
            in_flight=len(self._leases),
            duplicates_filtered=c["duplicates"],
            enqueued=c["enqueued"],
            acked=c["acked"],
            retries=c["retries"],
            failures=c["failures"],
            expired_leases=c["expired"],
            oldest_queued_age=None if oldest is None else max(0.0, now - oldest),
            hosts=depth,
        )

    async def bad_entries(self) -> dict[str, str]:
        """Entries moved aside: id -> ``"<reason>\\t<record>"``."""
        db = self._open()
        return {str(rid): f"{reason}\t{record}" for rid, reason, record in db.execute("SELECT * FROM bad")}

    async def purge(self) -> int:
        """Delete every request, lease, host state, counter and the duplicate filter; returns how many
        requests were deleted."""
        db = self._open()
        with self._tx() as tx:
            n = int(tx.execute("DELETE FROM requests").rowcount)
            for table in ("leases", "hosts", "dupefilter", "seen_log", "bad"):
                tx.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
            self._counts = dict.fromkeys(_COUNTERS, 0)
        # reload the (now empty) in-memory index
        self._load(db)
        self._notify()
        return n

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._notify()
        db = self._db
        if db is not None:
            try:
                if self._logged:
                    with self._tx() as tx:
                        self._snapshot(tx)
            finally:
                self._db = None
                db.close()
                if self._lock_file is not None:
                    self._lock_file.close()
                    self._lock_file = None
