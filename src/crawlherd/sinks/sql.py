"""``sqlite:///path`` / ``postgresql://...``: the ``items`` table of the config DB as a sink.

Each item row keeps the item's fields in ``data`` (JSON); fields from a detail page are merged over
the listing's, and ``data["_detail_at"]`` records when the detail page was last fetched.
Upserts use ``INSERT ... ON CONFLICT (fingerprint) DO UPDATE`` on both SQLite and PostgreSQL, and the
merge of the fields happens in that statement: two workers storing the same item never make two rows
and never lose each other's fields.

The table is the config DB's (``crawlherd db upgrade`` creates it); items reference their website
(``website_id``) and target, which must exist.

Errors: the database unreachable (connection refused or lost, locked past the busy timeout) is a
:class:`~crawlherd.errors.BackendUnavailableError` with ``role="database"``, mapped where the config
DB's errors always are (:func:`~crawlherd.db.errors.translate_db_errors`): this sink *is* the config
DB, so its outage is the process's one "config DB" outage, said once with the heartbeat's and the job
runs', not a second "sink" outage of the same server. Anything else (a value that is not JSON, a
website that does not exist) passes unchanged: no retry can help it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, String, any_, bindparam, func, literal_column, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db.dialect import sql_capabilities
from crawlherd.db.engine import create_engine
from crawlherd.db.errors import translate_db_errors
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
        sql = sql_capabilities(engine)
        # The merge of the stored fields with the new ones happens in the statement, under the row's
        # lock: two workers storing one item at once (its listing, its detail page) never lose fields.
        merged: ColumnElement[Any] = literal_column(
            "json_patch(items.data, excluded.data)"
            if sql.is_sqlite
            else "(items.data::jsonb || excluded.data::jsonb)::json"
        )
        # One statement for every upsert, executed with a list of rows (executemany): compiled once
        # and cached, where a multi-row VALUES would be compiled again for every number of rows.
        insert = sql.insert(StoredItem)
        self._upsert_rows = insert.on_conflict_do_update(
            index_elements=[StoredItem.fingerprint],
            set_={"data": merged, "last_seen": insert.excluded.last_seen, "url": insert.excluded.url},
        )
        # A counted write first inserts the rows that are not there (the unique index decides, so the
        # item is new for exactly one of two writers storing it at once) and learns which it inserted.
        self._insert_new = insert.on_conflict_do_nothing(index_elements=[StoredItem.fingerprint]).returning(
            StoredItem.fingerprint
        )
        # PostgreSQL: the stored rows of a write read with one array parameter, one statement whatever
        # their number (an IN list is a new statement, prepared again, for every number of rows), and
        # locked (in fingerprint order) until the write commits: a writer storing the same item at once
        # reads it after this one's fields, so that one change counts as one update. (SQLite: the
        # write's INSERT took the database's write lock already.)
        self._stored_any = select(StoredItem.fingerprint, StoredItem.data).where(
            StoredItem.fingerprint == any_(bindparam("fingerprints", type_=postgresql.ARRAY(String)))
        ).order_by(StoredItem.fingerprint).with_for_update() if sql.array_params else None

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
        with translate_db_errors("reading an item"):
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
        with translate_db_errors("counting the items"):
            async with self.engine.connect() as conn:
                return int((await conn.execute(select(func.count()).select_from(StoredItem))).scalar_one())

    async def _stored(self, conn: AsyncConnection, fingerprints: list[str]) -> dict[str, dict[str, Any]]:
        """The stored fields of these items (for the new/updated counts only)."""
        if self._stored_any is not None:
            rows = await conn.execute(self._stored_any, {"fingerprints": fingerprints})
        else:
            rows = await conn.execute(
                select(StoredItem.fingerprint, StoredItem.data).where(StoredItem.fingerprint.in_(fingerprints))
            )
        return {fp: data or {} for fp, data in rows}

    async def _upsert(
        self, items: list[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        return (await self.upsert_groups([(items, website_id, target_id)], seen_at=seen_at))[0]

    async def upsert_groups(
        self, groups: Sequence[tuple[Sequence[Item], int, int | None]], *, seen_at: datetime
    ) -> list[UpsertCounts]:
        """Every group in one transaction (up to 500 rows; more take one per 500)."""
        if seen_at.tzinfo is None:
            raise ValueError(f"seen_at must be timezone-aware, got {seen_at!r}")
        rows = _group_rows(groups)
        new = [0] * len(groups)
        updated = [0] * len(groups)
        for start in range(0, len(rows), _BATCH):
            with translate_db_errors(f"storing {len(rows)} item(s)"):
                async with self.engine.begin() as conn:
                    await self._write(conn, rows[start : start + _BATCH], new, updated, seen_at)
        return [UpsertCounts(new=n, updated=u) for n, u in zip(new, updated, strict=True)]

    async def upsert_counted_in(
        self, conn: AsyncConnection, groups: Sequence[tuple[Sequence[Item], int, int | None]], *, seen_at: datetime
    ) -> list[UpsertCounts]:
        """:meth:`upsert_groups` in the caller's transaction on ``conn`` (a connection of :attr:`engine`),
        with the counts: for writes that go with others (a listing page's items and its detail rows)."""
        if seen_at.tzinfo is None:
            raise ValueError(f"seen_at must be timezone-aware, got {seen_at!r}")
        rows = _group_rows(groups)
        new = [0] * len(groups)
        updated = [0] * len(groups)
        for start in range(0, len(rows), _BATCH):
            await self._write(conn, rows[start : start + _BATCH], new, updated, seen_at)
        return [UpsertCounts(new=n, updated=u) for n, u in zip(new, updated, strict=True)]

    async def upsert_in(
        self, conn: AsyncConnection, groups: Sequence[tuple[Sequence[Item], int, int | None]], *, seen_at: datetime
    ) -> None:
        """:meth:`upsert_groups` without the counts, in the caller's transaction on ``conn`` (a
        connection of :attr:`engine`): one statement, no read -- for writes whose counts nobody uses
        (a detail page's item, stored with its settle: its row is there, its listing page stored it).
        Its rows are locked in fingerprint order; a counted write's, those it inserts and then those
        that were there, each in that order: a write here that *inserts* items a counted write inserts
        at the same time could meet it in a deadlock (one of the two fails as an outage, tried again)."""
        if seen_at.tzinfo is None:
            raise ValueError(f"seen_at must be timezone-aware, got {seen_at!r}")
        rows = [_row(item.fingerprint.hex(), item, website_id, target_id, seen_at)
                for items, website_id, target_id in groups for item in items]
        rows.sort(key=itemgetter("fingerprint"))  # locks taken in one order by every writer (see _group_rows)
        if rows:
            await conn.execute(self._upsert_rows, rows)

    async def _write(
        self, conn: AsyncConnection, batch: list[tuple[int, str, Item, int, int | None]], new: list[int],
        updated: list[int], seen_at: datetime,
    ) -> None:
        """In ``conn``'s transaction: ``batch``'s rows upserted, their counts added to ``new`` and ``updated``.
        The rows not there are inserted first (new: exactly one writer inserts a row); the others are
        read under their lock, and their fields merged over the stored ones (updated when that changes
        them) -- counts that stay exact with other writers storing the same items at once."""
        inserted = {fp for (fp,) in await conn.execute(
            self._insert_new, [_row(fp, item, website_id, target_id, seen_at) for _, fp, item, website_id, target_id
                               in batch])}
        if len(inserted) == len(batch):  # every row new (no fingerprint twice): nothing more to write
            for g, *_ in batch:
                new[g] += 1
            return
        there = sorted({fp for _, fp, *_ in batch if fp not in inserted})
        stored = await self._stored(conn, there) if there else {}
        firsts: set[str] = set()  # a fingerprint met again in the batch: its first is the one inserted
        values = []
        for g, fp, item, website_id, target_id in batch:
            if fp in inserted and fp not in firsts:
                firsts.add(fp)
                new[g] += 1
                stored[fp] = dict(item.fields)
                continue
            old = stored.get(fp)
            if old is None:  # there at the insert, gone since (removed meanwhile): stored anew
                new[g] += 1
                stored[fp] = dict(item.fields)
            else:
                merged = {**old, **item.fields}
                if merged != old:
                    updated[g] += 1
                    stored[fp] = merged
            values.append(_row(fp, item, website_id, target_id, seen_at))
        await conn.execute(self._upsert_rows, values)


def _group_rows(
    groups: Sequence[tuple[Sequence[Item], int, int | None]],
) -> list[tuple[int, str, Item, int, int | None]]:
    """(group, fingerprint, item, website, target), in fingerprint order; a fingerprint met again is
    written again (executemany: one statement per row) after the first, and counted against what the
    first one stored. In a group, the last one wins. Every write locks its rows in fingerprint order:
    two workers storing overlapping items at once (searches that find the same postings) wait for each
    other rather than deadlock."""
    rows = [(g, item.fingerprint.hex(), item, website_id, target_id)
            for g, (items, website_id, target_id) in enumerate(groups)
            for item in {i.fingerprint: i for i in items}.values()]
    rows.sort(key=_fingerprint_of)  # stable: equal fingerprints keep their order
    return rows


def _fingerprint_of(row: tuple[int, str, Item, int, int | None]) -> str:
    return row[1]


def _row(fp: str, item: Item, website_id: int, target_id: int | None, seen_at: datetime) -> dict[str, Any]:
    """An item's row for the upsert statement."""
    return {
        "fingerprint": fp,
        "website_id": website_id,
        "target_id": target_id,
        "url": item.url,
        "data": dict(item.fields),  # only what we saw: merged over the row in SQL
        "first_seen": seen_at,
        "last_seen": seen_at,
    }


if TYPE_CHECKING:
    _conforms: type[Sink] = SQLSink
