"""``sqlite:///path`` / ``postgresql://...``: the ``items`` table of the config DB as a sink.

Each item row keeps the item's fields in ``data`` (JSON); fields from a detail page are merged over
the listing's, and ``data["_detail_at"]`` records when the detail page was last fetched.
Upserts use ``INSERT ... ON CONFLICT (fingerprint) DO UPDATE`` on both SQLite and PostgreSQL, and the
merge of the fields happens in that statement: two workers storing the same item never make two rows
and never lose each other's fields.

The table is the config DB's (``crawlherd db upgrade`` creates it); items reference their website
(``website_id``) and target, which must exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, func, literal_column, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db.engine import create_engine
from crawlherd.db.models import StoredItem
from crawlherd.item import Item
from crawlherd.sinks.base import Sink, SinkBase, SinkRecord, UpsertCounts

__all__ = ["SQLSink"]

_BATCH = 500


class SQLSink(SinkBase):
    """Items into the config DB's ``items`` table. ``engine`` is the caller's (``close`` leaves it
    open); :meth:`from_url` opens an engine of its own, which ``close`` disposes of."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._owns_engine = False
        postgres = engine.dialect.name == "postgresql"
        # The merge of the stored fields with the new ones happens in the statement, under the row's
        # lock: two workers storing one item at once (its listing, its detail page) never lose fields.
        merged: ColumnElement[Any] = literal_column(
            "(items.data::jsonb || excluded.data::jsonb)::json" if postgres else "json_patch(items.data, excluded.data)"
        )
        # One statement for every upsert, executed with a list of rows (executemany): compiled once
        # and cached, where a multi-row VALUES would be compiled again for every number of rows.
        insert = (postgresql.insert if postgres else sqlite.insert)(StoredItem)
        self._upsert_rows = insert.on_conflict_do_update(
            index_elements=[StoredItem.fingerprint],
            set_={"data": merged, "last_seen": insert.excluded.last_seen, "url": insert.excluded.url},
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLSink:
        """A sink on the database at ``url`` (``sqlite:///path``, ``postgresql://...``); ``options``
        go to :func:`crawlherd.db.create_engine` (``busy_timeout``, ``pool_size``)."""
        sink = cls(create_engine(url, **options))
        sink._owns_engine = True
        return sink

    def __repr__(self) -> str:
        return f"<SQLSink {self.engine.url.render_as_string(hide_password=True)}>"

    async def close(self) -> None:
        if self._owns_engine:
            self._owns_engine = False
            await self.engine.dispose()

    async def get(self, fingerprint: bytes) -> SinkRecord | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(StoredItem).where(StoredItem.fingerprint == fingerprint.hex()))
            ).one_or_none()
        if row is None:
            return None
        return SinkRecord(
            fingerprint=fingerprint,
            website_id=row.website_id,
            target_id=row.target_id,
            url=row.url,
            fields=row.data or {},
            first_seen=row.first_seen,
            last_seen=row.last_seen,
        )

    async def count(self) -> int:
        async with self.engine.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(StoredItem))).scalar_one())

    async def _stored(self, conn: AsyncConnection, fingerprints: list[str]) -> dict[str, dict[str, Any]]:
        """The stored fields of these items (for the new/updated counts only)."""
        rows = await conn.execute(
            select(StoredItem.fingerprint, StoredItem.data).where(StoredItem.fingerprint.in_(fingerprints))
        )
        return {fp: data or {} for fp, data in rows}

    async def _upsert(
        self, items: list[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        return await self._write({item.fingerprint.hex(): (item, website_id, target_id) for item in items}, seen_at)

    async def upsert_groups(
        self, groups: Sequence[tuple[Sequence[Item], int, int | None]], *, seen_at: datetime
    ) -> UpsertCounts:
        """Every group in one transaction (up to 500 items; more take one per 500)."""
        if seen_at.tzinfo is None:
            raise ValueError(f"seen_at must be timezone-aware, got {seen_at!r}")
        rows = {item.fingerprint.hex(): (item, website_id, target_id) for items, website_id, target_id in groups
                for item in items}  # the last one of a fingerprint wins, as in upsert
        return await self._write(rows, seen_at) if rows else UpsertCounts()

    async def _write(self, rows: dict[str, tuple[Item, int, int | None]], seen_at: datetime) -> UpsertCounts:
        new = updated = 0
        # One item per fingerprint, so one statement never touches a row twice.
        keys = list(rows)
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            async with self.engine.begin() as conn:
                stored = await self._stored(conn, batch)
                values = []
                for fp in batch:
                    item, website_id, target_id = rows[fp]
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
                await conn.execute(self._upsert_rows, values)
        return UpsertCounts(new=new, updated=updated)


if TYPE_CHECKING:
    _conforms: type[Sink] = SQLSink
