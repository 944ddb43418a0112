"""``crawlherd items export``: the items table as JSON Lines or CSV, streamed (no full load)."""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator
from typing import Any, TextIO

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.models import StoredItem, Website
from crawlherd.errors import ConfigurationError
from crawlherd.sinks.base import DETAIL_AT

__all__ = ["FORMATS", "export_items", "iter_items"]

FORMATS = ("jsonl", "csv")


async def iter_items(engine: AsyncEngine, *, website: str | None = None) -> AsyncIterator[dict[str, Any]]:
    """Items as dicts: website, url, fingerprint, first_seen, last_seen and the item's fields."""
    query = (
        select(
            Website.name,
            StoredItem.url,
            StoredItem.fingerprint,
            StoredItem.first_seen,
            StoredItem.last_seen,
            StoredItem.data,
        )
        .join(Website, Website.id == StoredItem.website_id)
        .order_by(StoredItem.id)
    )
    if website is not None:
        query = query.where(Website.name == website)
    async with engine.connect() as conn:
        result = await conn.stream(query)
        async for name, url, fp, first, last, data in result:
            fields = {k: v for k, v in (data or {}).items() if k != DETAIL_AT}
            yield {
                "website": name,
                "url": url,
                "fingerprint": fp,
                "first_seen": first.isoformat(),
                "last_seen": last.isoformat(),
                **fields,
            }


async def export_items(engine: AsyncEngine, out: TextIO, *, fmt: str = "jsonl", website: str | None = None) -> int:
    """Write every item to ``out``; returns how many. CSV columns are the union of all fields, in
    order of first appearance (a second pass, since fields vary by website)."""
    if fmt not in FORMATS:
        raise ConfigurationError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    n = 0
    if fmt == "jsonl":
        async for item in iter_items(engine, website=website):
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
            n += 1
        return n
    columns: dict[str, None] = {}
    async for item in iter_items(engine, website=website):
        columns.update(dict.fromkeys(item))
    writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    async for item in iter_items(engine, website=website):
        writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in item.items()})
        n += 1
    return n
