"""The ``items`` table of the config DB as a sink: upsert on the item fingerprint.

Each item row keeps the item's fields in ``data`` (JSON); fields from a detail page are merged over
the listing's, and ``data["_detail_at"]`` records when the detail page was last fetched.
Upserts use ``INSERT ... ON CONFLICT (fingerprint) DO UPDATE`` on both
SQLite and PostgreSQL, so two workers storing the same item never make two rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, literal_column, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db.models import StoredItem
from crawlherd.extract.rules import Item
from crawlherd.sinks.base import UpsertCounts

__all__ = ["DETAIL_AT", "SQLItemSink"]

DETAIL_AT = "_detail_at"
_BATCH = 500


class SQLItemSink:
    """Items into the config DB. ``engine`` is owned by the caller."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        postgres = engine.dialect.name == "postgresql"
        self._insert = postgresql.insert if postgres else sqlite.insert
        # The merge of the stored fields with the new ones happens in the statement, under the row's
        # lock: two workers storing one item at once (its listing, its detail page) never lose fields.
        self._merged: ColumnElement[Any] = literal_column(
            "(items.data::jsonb || excluded.data::jsonb)::json" if postgres else "json_patch(items.data, excluded.data)"
        )

    async def _stored(self, conn: AsyncConnection, fingerprints: list[str]) -> dict[str, dict[str, Any]]:
        """The stored fields of these items (for the new/updated counts only)."""
        rows = await conn.execute(
            select(StoredItem.fingerprint, StoredItem.data).where(StoredItem.fingerprint.in_(fingerprints))
        )
        return {fp: data or {} for fp, data in rows}

    async def upsert(
        self, items: Sequence[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        new = updated = 0
        # One item per fingerprint (the last wins), so one statement never touches a row twice.
        unique = {item.fingerprint.hex(): item for item in items}
        keys = list(unique)
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            async with self.engine.begin() as conn:
                stored = await self._stored(conn, batch)
                values = []
                for fp in batch:
                    item = unique[fp]
                    old = stored.get(fp)
                    if old is None:
                        new += 1
                    elif {**old, **item.fields} != old:
                        updated += 1
                    values.append(
                        {
                            "fingerprint": fp,
                            "website_id": website_id,
                            "target_id": target_id,
                            "url": item.url,
                            "data": dict(item.fields),  # only what we saw: merged over the row in SQL
                            "first_seen": seen_at,
                            "last_seen": seen_at,
                        }
                    )
                stmt = self._insert(StoredItem).values(values)
                stmt = stmt.on_conflict_do_update(
                    index_elements=[StoredItem.fingerprint],
                    set_={"data": self._merged, "last_seen": stmt.excluded.last_seen, "url": stmt.excluded.url},
                )
                await conn.execute(stmt)
        return UpsertCounts(new=new, updated=updated)
