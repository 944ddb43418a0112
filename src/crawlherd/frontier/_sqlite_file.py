"""The ``sqlite://`` frontier's file: its schema, the exclusive lock, opening it, the one map of SQLite's
errors to crawlherd's, and reading it back into memory at open (:func:`load`). The frontier's operations
are in :mod:`crawlherd.frontier.sqlite`."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from crawlherd import _json
from crawlherd._options import Count, check_options
from crawlherd.clock import Clock
from crawlherd.errors import BackendUnavailableError, ConfigurationError, disk_full, is_disk_full
from crawlherd.frontier._index import HostIndex
from crawlherd.frontier.dupefilter import BloomFilter, ExactFilter, make_dupefilter
from crawlherd.frontier.options import FrontierOptions, HostPolicy

__all__ = [
    "COUNTERS", "Loaded", "SQLiteOptions", "load", "open_file", "queued_by_host", "save_counters", "save_policy",
    "signed", "snapshot", "sqlite_errors",
]

log = logging.getLogger("crawlherd.frontier.sqlite")

LAYOUT_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    priority INTEGER NOT NULL,
    seq INTEGER NOT NULL,            -- FIFO order among equal priorities
    not_before REAL,                 -- not handed out before (enqueue's not_before, retry's delay)
    enqueued_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    record TEXT NOT NULL             -- JSON of Request.to_record(fingerprint=True) (versioned)
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
-- Hosts whose robots request was queued (enqueue_robots, once per host); id: that request while the
-- host is robots-pending (queued or leased), NULL once its lease was settled.
CREATE TABLE IF NOT EXISTS robots (host TEXT PRIMARY KEY, id INTEGER);
"""

COUNTERS = ("enqueued", "duplicates", "acked", "retries", "failures", "expired", "bad")


def signed(fp: int) -> int:
    """A 64-bit fingerprint as SQLite's signed INTEGER."""
    return fp - (1 << 64) if fp >= 1 << 63 else fp


def _unsigned(fp: int) -> int:
    return fp + (1 << 64) if fp < 0 else fp


@contextlib.contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """The one place SQLite's (and the file system's) errors become the frontier's typed outage."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        what = f"sqlite frontier {path}"
        message = disk_full(what, exc) if is_disk_full(exc) else f"{what}: {exc}"
        raise BackendUnavailableError(message, backend="sqlite", role="frontier") from exc


def open_file(path: Path, synchronous: str) -> tuple[sqlite3.Connection, IO[bytes]]:
    """The frontier's connection (WAL, the schema created) and its lock file, held: one process owns the
    file at a time (a second opener gets BackendUnavailableError)."""
    with sqlite_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(f"{path}.lock", "ab")  # noqa: SIM115 - held for the frontier's lifetime
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise BackendUnavailableError(
            f"sqlite frontier {path} is open in another process (or another frontier object)",
            backend="sqlite",
            role="frontier",
        ) from None
    try:
        with sqlite_errors(path):
            with contextlib.suppress(FileExistsError):  # owner only; -wal and -shm files take its mode
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={synchronous}")
            db.executescript(SCHEMA)
    except BaseException:
        lock.close()
        raise
    return db, lock


@dataclass(frozen=True)
class SQLiteOptions:
    """``synchronous``: ``normal`` (a commit is a write into the WAL) or ``full`` (an fsync per commit).
    ``snapshot_every``: fold the duplicate filter's log into a new snapshot after this many additions."""

    synchronous: Literal["normal", "full"] = "normal"
    snapshot_every: Count = 100_000

    def __post_init__(self) -> None:
        check_options(self, "sqlite frontier")


def snapshot(db: sqlite3.Connection, seen: ExactFilter | BloomFilter) -> None:
    """Store the duplicate filter whole; its log is folded in."""
    kind = "exact" if isinstance(seen, ExactFilter) else "bloom"
    db.execute("INSERT OR REPLACE INTO dupefilter VALUES (1, ?, ?)", (kind, seen.to_bytes()))
    db.execute("DELETE FROM seen_log")


def queued_by_host(db: sqlite3.Connection) -> tuple[dict[str, int], float | None]:
    """The queued (not leased) requests per host, and when the oldest of them was queued."""
    queued = "FROM requests WHERE id NOT IN (SELECT id FROM leases)"
    depth = dict(db.execute(f"SELECT host, COUNT(*) {queued} GROUP BY host").fetchall())  # noqa: S608 - fixed text
    oldest: float | None = db.execute(f"SELECT MIN(enqueued_at) {queued}").fetchone()[0]  # noqa: S608 - fixed text
    return depth, oldest


def save_counters(db: sqlite3.Connection, counts: dict[str, int]) -> None:
    db.execute("INSERT OR REPLACE INTO meta VALUES ('counters', ?)", (_json.dumps(counts),))  # with every transaction


def save_policy(db: sqlite3.Connection, host: str, policy: HostPolicy) -> None:
    db.execute(
        "INSERT INTO hosts (host, delay, max_in_flight) VALUES (?, ?, ?) "
        "ON CONFLICT (host) DO UPDATE SET delay = excluded.delay, max_in_flight = excluded.max_in_flight",
        (host, policy.delay, policy.max_in_flight),
    )


@dataclass
class Loaded:
    """What the frontier keeps in memory, as read from its file."""

    counts: dict[str, int]
    seen: ExactFilter | BloomFilter
    logged: int  # fingerprints in seen_log (added since the filter's snapshot)
    index: HostIndex[int]
    robots_hosts: set[str]
    tokens: itertools.count[int]
    token_base: str


def load(db: sqlite3.Connection, path: Path, opts: FrontierOptions, clock: Clock) -> Loaded:
    """Read the file into memory. Leases found in it belong to a process that is gone (the lock says so):
    they come back to the queue now, counted in ``expired``."""
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    kind = _check_meta(meta, path, opts)
    counters = _json.loads(meta.get("counters", "{}"))
    counts = {name: int(counters.get(name, 0)) for name in COUNTERS}
    seen, logged = _load_filter(db, opts)

    policies: dict[str, HostPolicy] = {}
    ready_at: dict[str, float] = {}
    for host, at, delay, cap in db.execute("SELECT host, ready_at, delay, max_in_flight FROM hosts"):
        if delay is not None or cap is not None:
            policies[host] = HostPolicy(delay=delay, max_in_flight=cap)
        ready_at[host] = at
    policies.update(opts.host_policies)

    now = clock.now()
    top = db.execute("SELECT MAX(COALESCE(MAX(seq), 0), COALESCE(MAX(id), 0)) FROM requests").fetchone()[0]
    index: HostIndex[int] = HostIndex(opts, policies, first_seq=top + 1, ready_at=ready_at)

    reclaimed = db.execute("SELECT r.id FROM leases l JOIN requests r ON r.id = l.id ORDER BY r.seq").fetchall()
    db.execute("BEGIN IMMEDIATE")
    if reclaimed:
        db.executemany(
            "UPDATE requests SET seq = ?, enqueued_at = ? WHERE id = ?",
            [(index.next_seq(now), now, rid) for (rid,) in reclaimed],
        )
        counts["expired"] += len(reclaimed)
        log.info("sqlite frontier %s: %d lease(s) of a previous process returned to the queue", path, len(reclaimed))
    db.execute("DELETE FROM leases")
    for host, policy in opts.host_policies.items():
        save_policy(db, host, policy)
    db.execute("INSERT OR REPLACE INTO meta VALUES ('layout', ?), ('dupefilter', ?)", (LAYOUT_VERSION, kind))
    save_counters(db, counts)
    db.execute("COMMIT")

    robots_hosts = _load_requests(db, index, now)
    return Loaded(counts, seen, logged, index, robots_hosts, itertools.count(1), f"{os.getpid()}.{int(now * 1000)}")


def _check_meta(meta: dict[str, str], path: Path, opts: FrontierOptions) -> str:
    """The file's dupefilter kind, after checking its layout and kind are the ones asked for."""
    layout = int(meta.get("layout", LAYOUT_VERSION))
    if layout != LAYOUT_VERSION:
        raise ConfigurationError(f"{path} uses frontier layout {layout}; this version reads {LAYOUT_VERSION}")
    kind = meta.get("dupefilter", opts.dupefilter)
    if kind != opts.dupefilter:
        raise ConfigurationError(
            f"{path} was created with dupefilter={kind!r}, not {opts.dupefilter!r}; open it with dupefilter={kind!r}"
        )
    return kind


def _load_filter(db: sqlite3.Connection, opts: FrontierOptions) -> tuple[ExactFilter | BloomFilter, int]:
    """The duplicate filter: its snapshot plus the fingerprints logged since; and how many those are."""
    row = db.execute("SELECT kind, data FROM dupefilter WHERE id = 1").fetchone()
    seen: ExactFilter | BloomFilter
    if row is None:
        seen = make_dupefilter(opts.dupefilter, capacity=opts.capacity, error_rate=opts.error_rate)
    elif row[0] == "exact":
        seen = ExactFilter.from_bytes(row[1])
    else:
        seen = BloomFilter.from_bytes(row[1])
    logged = 0
    for (fp,) in db.execute("SELECT fp FROM seen_log"):
        seen.add(_unsigned(fp))
        logged += 1
    return seen, logged


def _load_requests(db: sqlite3.Connection, index: HostIndex[int], now: float) -> set[str]:
    """The queued requests into ``index``; the hosts whose robots request was queued."""
    pending: dict[int, str] = {}
    robots_hosts: set[str] = set()
    for host, rid in db.execute("SELECT host, id FROM robots"):
        robots_hosts.add(host)
        if rid is not None:
            pending[rid] = host
    for rid, host, prio, seq, nb in db.execute("SELECT id, host, priority, seq, not_before FROM requests"):
        if rid in pending:
            index.add_robots(rid, host, prio, seq, now)
            if nb is not None:
                index.block(host, nb, now)  # a robots request retried with a delay
        else:
            index.load(rid, host, prio, seq, nb, now)
    index.sort(now)
    return robots_hosts
