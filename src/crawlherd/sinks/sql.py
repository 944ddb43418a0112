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

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.models import Item as ItemRow
from crawlherd.extract.rules import Item
from crawlherd.sinks.base import UpsertCounts

__all__ = ["DETAIL_AT", "SQLItemSink"]

DETAIL_AT = "_detail_at"
_BATCH = 500


class SQLItemSink:
    """Items into the config DB. ``engine`` is owned by the caller."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

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
                rows = await conn.execute(
                    select(ItemRow.fingerprint, ItemRow.data).where(ItemRow.fingerprint.in_(batch))
                )
                stored: dict[str, dict[str, Any]] = {fp: data or {} for fp, data in rows}
                values = []
                for fp in batch:
                    item = unique[fp]
                    old = stored.get(fp)
                    data = {**(old or {}), **item.fields}
                    if old is None:
                        new += 1
                    elif data != old:
                        updated += 1
                    values.append(
                        {
                            "fingerprint": fp,
                            "website_id": website_id,
                            "target_id": target_id,
                            "url": item.url,
                            "data": data,
                            "first_seen": seen_at,
                            "last_seen": seen_at,
                        }
                    )
                stmt = self._insert(ItemRow).values(values)
                stmt = stmt.on_conflict_do_update(
                    index_elements=[ItemRow.fingerprint],
                    set_={"data": stmt.excluded.data, "last_seen": stmt.excluded.last_seen, "url": stmt.excluded.url},
                )
                await conn.execute(stmt)
        return UpsertCounts(new=new, updated=updated)
