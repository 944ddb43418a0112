"""``memory://[name]``: the in-process sink. The reference implementation of :class:`Sink` and the
sink for tests and library use (read what was stored with :meth:`MemorySink.records`).

Sinks opened on the same ``memory://name`` (in one process) share their items; ``memory://`` alone
is a private store. Items die with the process.
"""

from __future__ import annotations

import weakref
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawlherd.errors import ConfigurationError
from crawlherd.item import Item
from crawlherd.sinks.base import Sink, SinkBase, SinkRecord, UpsertCounts

__all__ = ["MemorySink", "MemorySinkStore"]


class MemorySinkStore:
    """The items every :class:`MemorySink` on one ``memory://name`` shares, by fingerprint."""

    def __init__(self) -> None:
        self.records: dict[bytes, SinkRecord] = {}


_STORES: weakref.WeakValueDictionary[str, MemorySinkStore] = weakref.WeakValueDictionary()


class MemorySink(SinkBase):
    """Items in a dict, with the upsert rules of every sink (see :mod:`crawlherd.sinks.base`).

    ``name`` shares the store with every other sink of that name; ``store`` shares one explicitly.
    """

    def __init__(self, *, name: str = "", store: MemorySinkStore | None = None) -> None:
        if store is None:
            store = _STORES.get(name) if name else None
            if store is None:
                store = MemorySinkStore()
                if name:
                    _STORES[name] = store
        self.name = name
        self.store = store

    @classmethod
    def from_url(cls, url: str = "memory://", **options: Any) -> MemorySink:
        """``memory://`` (private) or ``memory://name`` (shared in this process)."""
        if options:
            raise ConfigurationError(f"the memory sink takes no options; got {', '.join(sorted(options))}")
        parts = urlsplit(url)
        return cls(name=(parts.netloc + parts.path).strip("/"))

    def __repr__(self) -> str:
        return f"<MemorySink memory://{self.name} {len(self.store.records)} items>"

    async def _upsert(
        self, items: list[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        new = updated = 0
        records = self.store.records
        for item in items:
            fp = item.fingerprint
            old = records.get(fp)
            if old is None:
                new += 1
                records[fp] = SinkRecord(fp, website_id, target_id, item.url, dict(item.fields), seen_at, seen_at)
                continue
            merged = {**old.fields, **item.fields}
            if merged != old.fields:
                updated += 1
            records[fp] = SinkRecord(fp, old.website_id, old.target_id, item.url, merged, old.first_seen, seen_at)
        return UpsertCounts(new=new, updated=updated)

    async def get(self, fingerprint: bytes) -> SinkRecord | None:
        return self.store.records.get(fingerprint)

    async def count(self) -> int:
        return len(self.store.records)

    def records(self) -> list[SinkRecord]:
        """Every stored item, in the order they were first stored."""
        return list(self.store.records.values())

    async def close(self) -> None:
        return None


if TYPE_CHECKING:
    _conforms: type[Sink] = MemorySink
