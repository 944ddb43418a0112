"""The sink protocol: where the items a worker extracts are stored.

One protocol for every sink (``memory://`` in process, the SQL sink on the config DB's ``items`` table
for ``sqlite:///`` and ``postgresql://``) and one contract suite (``tests/contract/test_sink_contract.py``).

Guarantees every sink keeps:

- **Idempotent upsert keyed by the item fingerprint**: storing an item twice leaves one stored item.
  Within one ``upsert`` call, items with the same fingerprint count once and the last one wins.
- **Fields merge**: the fields of a stored item are the union of every upsert's fields, the later
  value winning for a field given twice (a detail page's fields are merged over its listing's; a field
  an upsert does not mention is kept). Fields are JSON values.
- **Seen times**: ``first_seen`` is the ``seen_at`` of the upsert that created the stored item and
  never changes; ``last_seen`` is the ``seen_at`` of the latest upsert. ``url`` follows the latest
  upsert too; ``website_id`` and ``target_id`` stay those of the first.
- **Counts**: an upsert returns how many stored items it created (``new``) and how many it changed
  (``updated``: the merged fields differ from the stored ones). An item seen again unchanged is
  neither; its ``last_seen`` still moves.
- Concurrent upserts of one item (a listing and a detail page, from two workers) never lose each
  other's fields: the merge happens where the item is stored (in the SQL statement, under the row's
  lock), not from a stale read.

A sink is an async context manager; ``close`` releases only what the sink opened (a sink built on a
caller's engine leaves it open). Sinks are chosen by URL with :func:`crawlherd.sinks.open_sink`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from crawlherd._aio import AsyncClosing
from crawlherd.item import Item

__all__ = ["DETAIL_AT", "Sink", "SinkBase", "SinkRecord", "UpsertCounts", "upsert_each"]

#: The field in which the worker records when an item's detail page was last fetched (an ISO time).
#: Exports leave it out.
DETAIL_AT = "_detail_at"


@dataclass(frozen=True, slots=True)
class UpsertCounts:
    """How many items an upsert created and how many it changed (unchanged ones are neither)."""

    new: int = 0
    updated: int = 0


@dataclass(frozen=True, slots=True)
class SinkRecord:
    """One stored item, as a sink gives it back: ``fingerprint`` (the item's 8 bytes), the fields
    merged over all upserts, and the times it was first and last seen."""

    fingerprint: bytes
    website_id: int
    target_id: int | None
    url: str
    fields: Mapping[str, Any]
    first_seen: datetime
    last_seen: datetime


@runtime_checkable
class Sink(Protocol):
    """Stores items idempotently, keyed by fingerprint; see the module docstring for the rules."""

    async def __aenter__(self) -> Sink: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def upsert(
        self, items: Sequence[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        """Insert new items, update changed ones (their fields merged over the stored ones), and move
        ``last_seen`` of every one to ``seen_at`` (timezone-aware). ``website_id`` and ``target_id``
        say where the items come from."""
        ...

    async def get(self, fingerprint: bytes) -> SinkRecord | None:
        """The stored item with this fingerprint, or None."""
        ...

    async def count(self) -> int:
        """How many items are stored."""
        ...

    async def close(self) -> None:
        """Release what the sink opened. Idempotent."""
        ...


class SinkBase(AsyncClosing):
    """What every sink shares: the async-context-manager lifecycle, and the argument checks and
    de-duplication of :meth:`upsert`. A backend implements ``_upsert`` (its items are unique by
    fingerprint, the last of a duplicate kept), ``get``, ``count`` and ``close``."""

    async def upsert(
        self, items: Sequence[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        """See :meth:`Sink.upsert`."""
        if seen_at.tzinfo is None:
            raise ValueError(f"seen_at must be timezone-aware, got {seen_at!r}")
        unique = {item.fingerprint: item for item in items}  # the last one wins
        if not unique:
            return UpsertCounts()
        return await self._upsert(list(unique.values()), website_id=website_id, target_id=target_id, seen_at=seen_at)

    async def _upsert(
        self, items: list[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        raise NotImplementedError

    async def upsert_groups(
        self, groups: Sequence[tuple[Sequence[Item], int, int | None]], *, seen_at: datetime
    ) -> list[UpsertCounts]:
        """:meth:`upsert` of several ``(items, website_id, target_id)`` groups, in order: the counts of
        each (an item of two groups counts as the second upsert of it saw it). A backend that can (SQL)
        stores them in one transaction; this one calls :meth:`upsert` per group."""
        return await upsert_each(self, groups, seen_at=seen_at)

    async def close(self) -> None:
        raise NotImplementedError


async def upsert_each(
    sink: Sink | SinkBase, groups: Sequence[tuple[Sequence[Item], int, int | None]], *, seen_at: datetime
) -> list[UpsertCounts]:
    """``sink.upsert`` of each ``(items, website_id, target_id)`` group in turn: the counts of each."""
    return [
        await sink.upsert(items, website_id=website_id, target_id=target_id, seen_at=seen_at)
        for items, website_id, target_id in groups
    ]
