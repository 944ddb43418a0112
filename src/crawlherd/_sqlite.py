"""A SQLite connection on a thread of its own, for the stores that keep their data in a SQLite file
(the broker's table, the sessions store).

SQLite's calls block -- ``BEGIN IMMEDIATE`` waits up to its busy timeout for another process's
transaction -- so none runs on the event loop: the connection lives on one worker thread, and every
call is handed to it."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["SQLiteThread"]

T = TypeVar("T")


class SQLiteThread:
    """A connection made by :meth:`open` and the one thread every call on it runs on."""

    def __init__(self, conn: sqlite3.Connection, thread: ThreadPoolExecutor) -> None:
        self.conn = conn
        self._thread = thread

    @classmethod
    async def open(cls, connect: Callable[[], sqlite3.Connection], *, name: str) -> SQLiteThread:
        """``connect()`` run on a new thread named ``name``; the thread ends when it fails."""
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        try:
            conn = await asyncio.get_running_loop().run_in_executor(thread, connect)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(conn, thread)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` on the connection's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, self.conn)

    async def close(self) -> None:
        """Close the connection on its thread (an error doing so is passed over: it is gone either
        way), then end the thread."""
        with contextlib.suppress(sqlite3.Error):
            await asyncio.get_running_loop().run_in_executor(self._thread, self.conn.close)
        self._thread.shutdown(wait=False)
