"""Group commit of the items a worker stores: :class:`GroupedWrites`.

A worker stores the items of every listing page and one item per detail page, with many pages in
flight at once. Written page by page, every page costs a transaction of its own (a connection checked
out and pinged, ``BEGIN``, a read, an upsert, ``COMMIT``), and that is most of a worker's CPU and of
its pages' time. Here the items of the pages that finish while a write is running are stored together
in the next write: one :meth:`~crawlherd.sinks.base.SinkBase.upsert_groups` (one transaction, for the
SQL sink) whatever the number of pages, websites and targets.

The guarantees of the page loop are kept: a page's :meth:`GroupedWrites.store` returns only once its
items are stored -- with its own counts (new, updated) -- so its lease is acked only then; a write that
fails fails the call of every page in it (their pages are settled as failed or retried, as before --
nothing is lost), and a page cancelled while it waits does not stop the write it is part of (storing
again later is idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from crawlherd._aio import cancel_and_wait
from crawlherd.item import Item
from crawlherd.sinks.base import Sink, SinkBase, UpsertCounts, upsert_each

__all__ = ["GroupedWrites"]

_Entry = tuple[Sequence[Item], int, int | None, "asyncio.Future[UpsertCounts]"]


class GroupedWrites:
    """``GroupedWrites(sink, *, max_pages=200)``: ``await store(items, website_id=..., target_id=...)``
    returns the counts of ``items`` once they are stored in ``sink``, in one write with the items of
    the other calls waiting (at most ``max_pages`` calls a write). :meth:`close` stops the write running."""

    def __init__(self, sink: Sink, *, max_pages: int = 200) -> None:
        if max_pages < 1:
            raise ValueError(f"max_pages={max_pages!r}: must be >= 1")
        self.sink = sink
        self._max = max_pages
        self._pending: list[_Entry] = []
        self._task: asyncio.Task[None] | None = None
        #: Writes made, and the calls they served.
        self.writes = 0
        self.calls = 0

    async def store(self, items: Sequence[Item], *, website_id: int, target_id: int | None) -> UpsertCounts:
        if not items:
            return UpsertCounts()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[UpsertCounts] = loop.create_future()
        self._pending.append((items, website_id, target_id, done))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain(), name="crawlherd-grouped-writes")
        return await done

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
        groups = [(items, website_id, target_id) for items, website_id, target_id, _ in entries]
        seen_at = datetime.now(UTC)
        try:
            if isinstance(self.sink, SinkBase):
                counts = await self.sink.upsert_groups(groups, seen_at=seen_at)
            else:
                counts = await upsert_each(self.sink, groups, seen_at=seen_at)
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
        self.calls += len(entries)
        for (*_, done), own in zip(entries, counts, strict=True):
            if not done.done():
                done.set_result(own)

    async def close(self) -> None:
        """Stop: the write running is cancelled (its callers' pages go back to the frontier)."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
