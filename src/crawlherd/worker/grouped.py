"""Group commit of the items of detail pages: :class:`GroupedWrites`.

A worker stores one item per detail page, and many detail pages are in flight at once. Written one by
one, every page costs a transaction of its own (a connection checked out, ``BEGIN``, a read, an
upsert, ``COMMIT``) and the pages queue for the config DB's connections. Here the items of the pages
that finish while a write is running are stored together, in the next write: one ``Sink.upsert`` per
website and target, whatever the number of pages.

The guarantee of the page loop is kept: a page's :meth:`GroupedWrites.store` returns only once its
item is stored, so its lease is acked only then; a write that fails fails the call of every item in it
(their pages are settled as failed or retried, as before -- nothing is lost), and a caller cancelled
while it waits does not stop the write it is part of (storing again later is idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from crawlherd._aio import cancel_and_wait
from crawlherd.item import Item
from crawlherd.sinks.base import Sink, SinkBase, UpsertCounts, upsert_each

__all__ = ["GroupedWrites"]

_Entry = tuple[Item, int, int | None, "asyncio.Future[None]"]


class GroupedWrites:
    """``GroupedWrites(sink, on_stored, *, max_items=500)``: ``await store(item, website_id=...,
    target_id=...)`` returns once ``item`` is stored in ``sink``; ``on_stored(counts)`` is called
    after each write with what it created and changed. :meth:`close` waits for the write running."""

    def __init__(self, sink: Sink, on_stored: Callable[[UpsertCounts], None], *, max_items: int = 500) -> None:
        if max_items < 1:
            raise ValueError(f"max_items={max_items!r}: must be >= 1")
        self.sink = sink
        self._on_stored = on_stored
        self._max = max_items
        self._pending: list[_Entry] = []
        self._task: asyncio.Task[None] | None = None
        #: Writes made and items they held (for tests and statistics).
        self.writes = 0
        self.items = 0

    async def store(self, item: Item, *, website_id: int, target_id: int | None) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, website_id, target_id, done))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="crawlherd-grouped-writes")
        await done

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[: self._max], self._pending[self._max :]
                await self._write(batch)
        finally:  # cancelled (close): the calls still waiting are cancelled too, never left hanging
            for *_, done in self._pending:
                done.cancel()
            self._pending = []

    async def _write(self, entries: list[_Entry]) -> None:
        groups: dict[tuple[int, int | None], list[Item]] = {}
        for item, website_id, target_id, _ in entries:
            groups.setdefault((website_id, target_id), []).append(item)
        try:
            counts = await _upsert_groups(self.sink, [(items, w, t) for (w, t), items in groups.items()])
        except asyncio.CancelledError:
            for *_, done in entries:
                done.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - handed to every caller of the write
            for *_, done in entries:
                if not done.done():
                    done.set_exception(exc)
            return
        self.writes += 1
        self.items += len(entries)
        self._on_stored(counts)
        for *_, done in entries:
            if not done.done():
                done.set_result(None)

    async def close(self) -> None:
        """Stop: the write running is cancelled (its callers' pages go back to the frontier)."""
        task, self._task = self._task, None
        await cancel_and_wait(task)



async def _upsert_groups(sink: Sink, groups: list[tuple[list[Item], int, int | None]]) -> UpsertCounts:
    """All the groups in one write when the sink can (:meth:`SinkBase.upsert_groups`), else one
    ``upsert`` per group."""
    seen_at = datetime.now(UTC)
    if isinstance(sink, SinkBase):
        return await sink.upsert_groups(groups, seen_at=seen_at)
    return await upsert_each(sink, groups, seen_at=seen_at)
