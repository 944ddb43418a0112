"""The SQLite sessions store keeps SQLite off the event loop: a transaction that waits for another
process's lock on the file lets the loop run meanwhile (it used to block it for the busy timeout)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from crawlherd.sessions import Session, open_sessions


async def test_a_busy_file_does_not_block_the_event_loop(tmp_path: Path) -> None:
    async with open_sessions(f"sqlite:///{tmp_path / 'frontier.db'}") as store:
        holder = sqlite3.connect(tmp_path / "frontier.db.sessions", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            adding = asyncio.create_task(store.add("site", Session("s1", "direct")))
            ticks = 0
            while ticks < 20:  # the loop keeps running while the store waits for the lock
                await asyncio.sleep(0.005)
                ticks += 1
            assert not adding.done(), "the store's transaction ran on the event loop"
            holder.execute("COMMIT")
        finally:
            holder.close()
        await asyncio.wait_for(adding, 15)
        assert [s.id for s in await store.sessions("site")] == ["s1"]
