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

from collections.abc import Sequence
from datetime import UTC, datetime

from crawlherd._resilience import Batcher
from crawlherd.db.errors import translate_db_errors
from crawlherd.item import Item
from crawlherd.sinks import SQLSink
from crawlherd.sinks.base import Sink, SinkBase, UpsertCounts, upsert_each
from crawlherd.worker.details import DetailLedger, RunKey

__all__ = ["GroupedWrites"]

_Group = tuple[Sequence[Item], int, "int | None"]
#: A listing page's write: its group of items, and its run's detail pages (items) to expect.
_Listing = tuple[_Group, RunKey, Sequence[str]]
#: A detail page's item: (item, website_id, target_id).
_Detail = tuple[Item, int, "int | None"]


class GroupedWrites:
    """``GroupedWrites(sink, *, max_pages=200)``: ``await store(items, website_id=..., target_id=...)``
    returns the counts of ``items`` once they are stored in ``sink``, in one write with the items of
    the other calls waiting (at most ``max_pages`` calls a write). :meth:`close` stops the write running.
    The grouping is the resilience kernel's :class:`~crawlherd._resilience.Batcher`."""

    def __init__(self, sink: Sink, *, max_pages: int = 200, ledger: DetailLedger | None = None) -> None:
        if max_pages < 1:
            raise ValueError(f"max_pages={max_pages!r}: must be >= 1")
        self.sink = sink
        self.ledger = ledger
        self._batcher: Batcher[_Group, UpsertCounts] = Batcher(
            self._write, max_batch=max_pages, name="crawlherd-grouped-writes"
        )
        # the items are in the ledger's database: a detail page's item and its settle go in one write
        self._details: Batcher[_Detail, None] | None = None
        # and a listing page's items and its detail pages' rows (DetailLedger.expect) go in one write
        self._listings: Batcher[_Listing, tuple[UpsertCounts, set[str]]] | None = None
        if ledger is not None and isinstance(sink, SQLSink) and sink.engine is ledger.engine:
            self._details = Batcher(self._write_details, max_batch=max_pages, name="crawlherd-detail-writes")
            self._listings = Batcher(self._write_listings, max_batch=max_pages, name="crawlherd-listing-writes")

    @property
    def writes(self) -> int:
        """Writes made."""
        return self._batcher.batches

    @property
    def calls(self) -> int:
        """The calls the writes served."""
        return self._batcher.calls

    async def store(self, items: Sequence[Item], *, website_id: int, target_id: int | None) -> UpsertCounts:
        if not items:
            return UpsertCounts()
        return await self._batcher((items, website_id, target_id))

    async def store_listing(
        self, items: Sequence[Item], *, website_id: int, target_id: int | None, run: RunKey, details: Sequence[str]
    ) -> tuple[UpsertCounts, set[str]]:
        """Store a listing page's items and write its detail pages' rows in :attr:`ledger` (``details``,
        hex fingerprints, for ``run``; see :meth:`DetailLedger.expect`): their counts and the details
        whose row is new. One transaction with the other listing pages waiting when the sink is the
        ledger's database; else stored, then expected."""
        assert self.ledger is not None
        if self._listings is None:
            counts = await self.store(items, website_id=website_id, target_id=target_id)
            return counts, await self.ledger.expect(run, details)
        if not items and not details:
            return UpsertCounts(), set()
        self.ledger.watch(run, details)  # before the rows (see DetailLedger.expect)
        return await self._listings(((items, website_id, target_id), run, details))

    async def _write_listings(self, listings: list[_Listing]) -> list[tuple[UpsertCounts, set[str]] | BaseException]:
        assert isinstance(self.sink, SQLSink) and self.ledger is not None
        seen_at = datetime.now(UTC)
        with translate_db_errors(f"storing {len(listings)} listing page(s)"):
            async with self.sink.engine.begin() as conn:
                counts = await self.sink.upsert_counted_in(conn, [group for group, _, _ in listings], seen_at=seen_at)
                fresh = await self.ledger.expect_in(conn, [(run, details) for _, run, details in listings])
        return list(zip(counts, fresh, strict=True))

    async def store_detail(self, item: Item, *, website_id: int, target_id: int | None) -> None:
        """Store a detail page's item and settle its page in :attr:`ledger`: in one transaction with the
        other detail pages waiting, one statement each, when the sink is the ledger's database (the
        counts are not read: a detail page completes its item); else stored, then settled."""
        if self._details is not None:
            await self._details((item, website_id, target_id))
            return
        assert self.ledger is not None
        await self.store([item], website_id=website_id, target_id=target_id)
        await self.ledger.settle(item.fingerprint.hex())

    async def _write_details(self, details: list[_Detail]) -> list[None | BaseException]:
        assert isinstance(self.sink, SQLSink) and self.ledger is not None
        seen_at = datetime.now(UTC)
        items = [item.fingerprint.hex() for item, _, _ in details]
        with translate_db_errors(f"storing {len(details)} detail page(s)"):
            async with self.sink.engine.begin() as conn:
                await self.sink.upsert_in(conn, [([i], w, t) for i, w, t in details], seen_at=seen_at)
                await self.ledger.settle_in(conn, [(item, None) for item in items])
        self.ledger.settled(items)
        return [None] * len(details)

    async def _write(self, groups: list[_Group]) -> list[UpsertCounts | BaseException]:
        seen_at = datetime.now(UTC)
        if isinstance(self.sink, SinkBase):
            return list(await self.sink.upsert_groups(groups, seen_at=seen_at))
        return list(await upsert_each(self.sink, groups, seen_at=seen_at))

    async def close(self) -> None:
        """Stop: the writes running are cancelled (their callers' pages go back to the frontier)."""
        await self._batcher.close()
        for batcher in (self._details, self._listings):
            if batcher is not None:
                await batcher.close()
