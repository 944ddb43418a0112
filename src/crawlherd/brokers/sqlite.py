"""``sqlite:///path/to/file.db?queue=jobs``: a broker in a SQLite file (by default the config DB file).

Two tables, created when missing (``CREATE TABLE IF NOT EXISTS``), shared by every queue of the file:
``broker_messages`` and ``broker_dead_letters``. The file is put in WAL mode and each connection waits up
to ``busy_timeout`` seconds for a lock. Publishes commit with ``synchronous=FULL`` (``publish`` returns
after the row is committed durably; concurrent publishes share one commit); settlements commit with
``synchronous=NORMAL``: one lost to a power cut means a redelivery, which at-least-once allows.

Delivery model (the same as ``memory://``): each message has an ``available_at`` time. A consumer
leases messages in one ``BEGIN IMMEDIATE`` transaction by pushing ``available_at`` to now +
``visibility_timeout`` and writing a fresh lease token; settling needs the token. A consumer that dies
loses nothing: when its lease runs out, the message is available again (``redelivered=True``). Delayed
messages and retries are rows whose ``available_at`` lies in the future. ``retry`` is one UPDATE
(body, ``available_at``), so it is atomic: the message is never both lost and live twice.

Options (URL query or keywords): :class:`SQLiteBrokerOptions`. All SQLite work runs in one thread per
broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit

from crawlherd._options import Delay, NonEmpty, Seconds
from crawlherd._resilience import Batcher
from crawlherd._sqlite import SQLiteThread
from crawlherd.brokers._common import (
    BrokerBase,
    BrokerOptions,
    build_options,
    check_delay,
    check_publish,
    new_id,
    unavailable,
)
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import BrokerError, ConfigurationError, PublishError, disk_full, is_disk_full

__all__ = ["SQLiteBroker", "SQLiteBrokerOptions"]

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS broker_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    msg_key TEXT NOT NULL,
    body BLOB NOT NULL,
    headers TEXT NOT NULL DEFAULT '{}',
    available_at REAL NOT NULL,
    lease TEXT,
    deliveries INTEGER NOT NULL DEFAULT 0,
    published_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS broker_messages_ready ON broker_messages (queue, available_at, id);
CREATE TABLE IF NOT EXISTS broker_dead_letters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    msg_key TEXT NOT NULL,
    body BLOB NOT NULL,
    headers TEXT NOT NULL DEFAULT '{}',
    reason TEXT NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 0,
    dead_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS broker_dead_letters_queue ON broker_dead_letters (queue, id);
"""


@dataclass(frozen=True)
class SQLiteBrokerOptions(BrokerOptions):
    """The ``queue``'s name (several share one file); ``visibility_timeout`` seconds a delivery stays
    leased (``touch`` extends it); ``poll_interval`` how often an idle consumer looks for work;
    ``busy_timeout`` a connection waits for the file's lock; ``clock`` (keyword only) of the leases."""

    backend = "sqlite"

    clock: Clock = field(default_factory=SystemClock)
    queue: NonEmpty = "jobs"
    visibility_timeout: Seconds = 15.0
    poll_interval: Seconds = 0.2
    busy_timeout: Delay = 5.0


def sqlite_path(url: str) -> str:
    """The file of ``sqlite:///relative.db`` / ``sqlite:////absolute.db`` (SQLAlchemy's rules)."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ConfigurationError(f"sqlite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db")
    path = unquote(parts.path)
    path = path[1:] if path.startswith("/") else path
    if not path or path == ":memory:":
        raise ConfigurationError(
            f"sqlite URL {url!r}: the broker needs a file that every process can open, e.g. sqlite:///crawlherd.db"
        )
    return path



@contextmanager
def _driver_errors(broker: SQLiteBroker, *, publishing: bool = False, doing: str = "") -> Iterator[None]:
    """sqlite3's errors as crawlherd's, the one place the SQLite broker decides what is an outage: an
    ``OperationalError`` (the file cannot be opened, its lock was not had within ``busy_timeout``, the
    disk is full) is one -- except for a publish, which says the message was not published."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if publishing:
            raise PublishError(f"{broker!r}: not published: {exc}") from exc
        what = f"sqlite broker {broker.path}"  # the file's disk full: said as every SQLite store says it
        raise unavailable(disk_full(what, exc) if is_disk_full(exc) else f"{broker!r}: {doing}{exc}",
                          backend="sqlite") from exc
    except sqlite3.Error as exc:
        raise (PublishError if publishing else BrokerError)(f"{broker!r}: {doing}{exc}") from exc

class SQLiteBroker(BrokerBase):
    """A broker in a SQLite file; see the module docstring."""

    backend = "sqlite"
    lease_option = "visibility_timeout"

    def __init__(self, path: str | Path, *, options: SQLiteBrokerOptions | None = None) -> None:
        super().__init__()
        self.path = str(path)
        self.options = opts = options or SQLiteBrokerOptions()
        self.queue = opts.queue
        self._clock = opts.clock
        self._db: SQLiteThread | None = None
        # group commit: every publish made while a transaction runs goes into the next one, in order
        self._publishes: Batcher[tuple[Any, ...], None] = Batcher(
            self._insert_rows, max_batch=5000, name=f"sqlite-broker-publish:{self.path}"
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteBroker:
        opts = build_options(SQLiteBrokerOptions, url, options, backend="sqlite", live=("clock",))
        return cls(sqlite_path(url), options=opts)

    def _describe(self) -> str:
        return f"sqlite:///{self.path} queue={self.queue!r}"

    # -- plumbing ----------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, publishing: bool = False) -> T:
        if not self._opened:
            await self._ensure_open()
        db = self._db
        if db is None:
            raise BrokerError(f"{self!r} is closed")
        with _driver_errors(self, publishing=publishing):
            return await db.run(fn)

    async def _open(self) -> None:
        def connect() -> sqlite3.Connection:
            if self.path != ":memory:" and not self.path.startswith("file:") and Path(self.path).parent.exists():
                # owner only; SQLite gives its -wal and -shm files the permissions of the database file
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            conn = sqlite3.connect(self.path, timeout=self.options.busy_timeout, isolation_level=None,
                                   check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout * 1000)}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")  # FULL for publishes, see _insert_rows
                conn.executescript(SCHEMA)
            except BaseException:
                conn.close()
                raise
            return conn

        with _driver_errors(self, doing="cannot open the database file: "):
            self._db = await SQLiteThread.open(connect, name="crawlherd-sqlite-broker")

    async def _shutdown(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await self._publishes.flush()
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    # -- protocol ----------------------------------------------------------------------------------

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        hdrs = check_publish(body, key, headers, delay)
        now = self._clock.now()
        row = (self.queue, key, bytes(body), json.dumps(hdrs), now + delay, now)
        if not self._opened:
            await self._ensure_open()
        if self._closed:
            raise BrokerError(f"{self!r} is closed")
        await self._publishes(row)

    async def _insert_rows(self, rows: list[tuple[Any, ...]]) -> list[None | BaseException]:
        """One transaction for the publishes of a batch; each publisher is told only after the COMMIT."""

        def insert(conn: sqlite3.Connection) -> None:
            # a confirmed publish must survive a power cut: this commit syncs the WAL (and with it
            # every earlier commit of this file)
            conn.execute("PRAGMA synchronous = FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany("INSERT INTO broker_messages (queue, msg_key, body, headers, available_at, "
                                     "published_at) VALUES (?, ?, ?, ?, ?, ?)", rows)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            finally:
                conn.execute("PRAGMA synchronous = NORMAL")

        try:
            await self._run(insert, publishing=True)
        except BrokerError:
            raise
        except Exception as exc:
            raise PublishError(str(exc)) from exc
        return [None] * len(rows)

    async def _fetch(self, state: Any, n: int) -> Sequence[Delivery]:
        now = self._clock.now()
        lease = new_id()
        queue, max_deliveries = self.queue, self.options.max_deliveries
        until = now + self.options.visibility_timeout

        def lease_rows(conn: sqlite3.Connection) -> list[tuple[int, str, bytes, str, int]]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(
                    "SELECT id, msg_key, body, headers, deliveries FROM broker_messages "
                    "WHERE queue = ? AND available_at <= ? ORDER BY available_at, id LIMIT ?", (queue, now, n),
                ).fetchall()
                if max_deliveries:
                    poison = [r for r in rows if r[4] >= max_deliveries]
                    for r in poison:
                        _move_to_dead(conn, r[0], f"delivered {r[4]} times without being settled", now)
                    rows = [r for r in rows if r[4] < max_deliveries]
                conn.executemany(
                    "UPDATE broker_messages SET available_at = ?, lease = ?, deliveries = deliveries + 1 WHERE id = ?",
                    [(until, lease, r[0]) for r in rows],
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return rows

        rows = await self._run(lease_rows)
        if not rows:
            await asyncio.sleep(self.options.poll_interval)
            return []
        return [Delivery(bytes(body), k, f"{mid}:{lease}", deliveries > 0, json.loads(h))
                for mid, k, body, h, deliveries in rows]

    @staticmethod
    def _parse(delivery: Delivery) -> tuple[int, str]:
        mid, _, lease = delivery.delivery_id.partition(":")
        return int(mid), lease

    async def _settle(self, delivery: Delivery, fn: Callable[[sqlite3.Connection, int, str], int]) -> None:
        mid, lease = self._parse(delivery)
        await self._settle_with(
            delivery,
            lambda: self._run(lambda conn: fn(conn, mid, lease)),
            f"message {mid} (key {delivery.key!r}): the lease was lost -- the visibility timeout "
            f"({self.options.visibility_timeout} s) expired and it was delivered again, or it was settled",
        )

    async def _touch(self, delivery: Delivery) -> None:
        mid, lease = self._parse(delivery)
        until = self._clock.now() + self.options.visibility_timeout
        extended = await self._run(lambda conn: conn.execute(
            "UPDATE broker_messages SET available_at = ? WHERE id = ? AND lease = ?", (until, mid, lease)).rowcount)
        if not extended:
            raise BrokerError(f"message {mid} (key {delivery.key!r}): the lease was lost before it was extended")

    async def ack(self, delivery: Delivery) -> None:
        await self._settle(delivery, lambda conn, mid, lease: conn.execute(
            "DELETE FROM broker_messages WHERE id = ? AND lease = ?", (mid, lease)).rowcount)

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        if not requeue:
            await self.dead_letter(delivery, "nacked")
            return
        now = self._clock.now()
        await self._settle(delivery, lambda conn, mid, lease: conn.execute(
            "UPDATE broker_messages SET available_at = ?, lease = NULL WHERE id = ? AND lease = ?",
            (now, mid, lease)).rowcount)

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        check_delay(delay)
        if body is not None:
            check_publish(body, delivery.key, None, delay)
        at = self._clock.now() + delay
        new_body = None if body is None else bytes(body)
        await self._settle(delivery, lambda conn, mid, lease: conn.execute(
            "UPDATE broker_messages SET available_at = ?, lease = NULL, deliveries = 0, body = coalesce(?, body) "
            "WHERE id = ? AND lease = ?", (at, new_body, mid, lease)).rowcount)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        now = self._clock.now()

        def move(conn: sqlite3.Connection, mid: int, lease: str) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                moved = _move_to_dead(conn, mid, reason, now, lease)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return moved

        await self._settle(delivery, move)

    async def _release(self, deliveries: Sequence[Delivery]) -> None:
        now = self._clock.now()
        rows = [(now, *self._parse(d)) for d in deliveries]
        await self._run(lambda conn: conn.executemany(
            "UPDATE broker_messages SET available_at = ?, lease = NULL WHERE id = ? AND lease = ?", rows))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = await self._run(lambda conn: conn.execute(
            "SELECT id, msg_key, body, headers, reason, dead_at FROM broker_dead_letters WHERE queue = ? "
            "ORDER BY id LIMIT ?", (self.queue, limit)).fetchall())
        return [DeadLetter(bytes(body), k, reason, str(i), at, json.loads(h)) for i, k, body, h, reason, at in rows]

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        now = self._clock.now()
        where, args = "queue = ?", [self.queue]
        if dead_id is not None:
            if not dead_id.isdigit():
                return 0
            where, args = "queue = ? AND id = ?", [self.queue, dead_id]

        def move_back(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO broker_messages (queue, msg_key, body, headers, available_at, published_at) "
                    f"SELECT queue, msg_key, body, headers, ?, ? FROM broker_dead_letters WHERE {where} ORDER BY id",
                    [now, now, *args])
                n = conn.execute(f"DELETE FROM broker_dead_letters WHERE {where}", args).rowcount
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return int(n)

        return await self._run(move_back)

    async def pending(self) -> int:
        now = self._clock.now()
        row = await self._run(lambda conn: conn.execute(
            "SELECT count(*) FROM broker_messages WHERE queue = ? AND available_at <= ?", (self.queue, now)).fetchone())
        return int(row[0])


def _move_to_dead(conn: sqlite3.Connection, mid: int, reason: str, now: float, lease: str | None = None) -> int:
    """Move message ``mid`` (held under ``lease``, when given) to the dead letters; rows moved."""
    cond, args = ("id = ?", [mid]) if lease is None else ("id = ? AND lease = ?", [mid, lease])
    conn.execute(
        "INSERT INTO broker_dead_letters (queue, msg_key, body, headers, reason, deliveries, dead_at) "
        f"SELECT queue, msg_key, body, headers, ?, deliveries, ? FROM broker_messages WHERE {cond}",
        [reason, now, *args])
    return int(conn.execute(f"DELETE FROM broker_messages WHERE {cond}", args).rowcount)


if TYPE_CHECKING:
    _conforms: type[Broker] = SQLiteBroker
