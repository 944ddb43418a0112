"""A SQLite config DB's connections, run on the event loop's thread: :func:`inline_connect`.

aiosqlite runs every call of a connection (each ``execute``, ``fetchall``, ``commit``) on a thread of
its own and hands the result back through the loop (a queue, a future, a wake-up of the loop): for the
config DB's short statements that hand-off cost more than the statement. A worker's ``crawlherd run``
spent about a fifth of its CPU in it (aiosqlite's loop side and its thread). Here a call runs on the
caller's thread, as the SQLite frontier's do, with SQLite's busy timeout at 0: it never waits for a lock
there. A call that finds the database locked (another connection, or another process, is writing)
is run again on the connection's thread with the busy timeout the engine was given -- it waits there,
as every call did before, while the loop goes on.

Retrying a call that failed with ``SQLITE_BUSY`` is what SQLite's own busy handler does: such a call
did nothing. The write transactions of one engine's connections (every transaction: the engine opens
each with ``BEGIN IMMEDIATE``) take turns on an asyncio lock first (:class:`WriteTurn`): one waits for
another of the same process without SQLite's busy handler, which sleeps in steps of up to 100 ms, and
without a thread. SQLite's lock is still what decides; the turn only keeps them from colliding.

One call at a time per connection, as before (SQLAlchemy awaits each before the next), so
the sqlite3 connection is shared by the two threads without ever being used by both at once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import aiosqlite

__all__ = ["InlineConnection", "WriteTurn", "inline_connect"]

_BEGIN = "BEGIN IMMEDIATE"
_ENDS = ("COMMIT", "ROLLBACK")


def _busy(exc: sqlite3.OperationalError) -> bool:
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


class WriteTurn:
    """The turn of one engine's connections to hold a transaction: an asyncio lock (made on the loop
    that first uses it), waited for at most ``timeout`` seconds -- then ``database is locked``, as
    SQLite's busy timeout would say."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def take(self) -> bool:
        """Wait for the turn: True once taken; False on another loop than the first (no turn there)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            if self._lock is not None and self._lock.locked():
                return False  # held on another loop (a test's): SQLite's lock alone decides here
            self._lock, self._loop = asyncio.Lock(), loop
        try:
            async with asyncio.timeout(self.timeout):
                await self._lock.acquire()
        except TimeoutError:
            raise sqlite3.OperationalError("database is locked") from None
        return True

    def give(self) -> None:
        if self._lock is not None and self._lock.locked():
            self._lock.release()


class InlineConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls run on the caller's thread unless the database is locked
    (see the module docstring); ``busy_timeout`` is the wait, in seconds, of a call run again, and
    ``turn`` the write turn it shares with the other connections of its engine."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], busy_timeout: float,
                 turn: WriteTurn | None = None) -> None:
        super().__init__(connector, 64)
        self.busy_timeout = busy_timeout
        self.turn = turn or WriteTurn(busy_timeout)
        self._turn_held = False
        #: Calls run again on the connection's thread (the database was locked), for tests.
        self.waited = 0

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._connection is None or not self._running:  # connecting, or closed: aiosqlite's way
            return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]
        sql = args[0] if args and isinstance(args[0], str) else None
        ends = sql in _ENDS or fn == self._connection.commit or fn == self._connection.rollback
        if sql == _BEGIN and not self._turn_held:
            self._turn_held = await self.turn.take()
        try:
            return await self._run(fn, args, kwargs)
        except BaseException:
            if sql == _BEGIN:
                self._give_turn()  # no transaction began
            raise
        finally:
            if ends:
                self._give_turn()

    def _give_turn(self) -> None:
        if self._turn_held:
            self._turn_held = False
            self.turn.give()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self._give_turn()

    def stop(self) -> asyncio.Future[Any] | None:  # SQLAlchemy's terminate: the transaction goes with it
        self._give_turn()
        return super().stop()

    async def _run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return fn(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
        self.waited += 1
        return await super()._execute(self._waiting, fn, args, kwargs)  # type: ignore[no-untyped-call]

    def _waiting(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``fn`` on the connection's thread, waiting up to ``busy_timeout`` for the lock."""
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        try:
            return fn(*args, **kwargs)
        finally:
            conn.execute("PRAGMA busy_timeout=0")


def inline_connect(busy_timeout: float) -> Callable[..., InlineConnection]:
    """The ``async_creator_fn`` of SQLAlchemy's aiosqlite dialect: :class:`InlineConnection` s whose
    calls wait ``busy_timeout`` seconds for a lock (on their thread), taking turns on one :class:`WriteTurn`."""
    turn = WriteTurn(busy_timeout)

    def connect(database: str, **kwargs: Any) -> InlineConnection:
        kwargs.update(timeout=0, check_same_thread=False)  # both threads use it, one at a time

        def connector() -> sqlite3.Connection:
            conn: sqlite3.Connection = sqlite3.connect(database, **kwargs)
            return conn

        return InlineConnection(connector, busy_timeout, turn)

    return connect
