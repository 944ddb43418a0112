"""Paged, filtered listings for the console and ``--json``: targets, websites, items. Pages are keyset
pages (``after_id``): the thousandth page costs what the first does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import String, cast, func, or_, select, true
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.db.engine import count_rows, db_now
from crawlherd.db.models import JobRun, ScrapeTarget, StoredItem, Website
from crawlherd.dispatch.targets import TARGET_ROWS, TargetInfo, target_info
from crawlherd.errors import CrawlherdError
from crawlherd.sitespec import SiteSpec

__all__ = [
    "ItemRow",
    "WebsiteRow",
    "WebsiteUsage",
    "browse_items",
    "browse_targets",
    "get_website",
    "list_websites",
    "website_usage",
    "website_names",
]


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def browse_targets(
    engine: AsyncEngine,
    *,
    q: str = "",
    website: str | None = None,
    state: str | None = None,
    after_id: int | None = None,
    limit: int = 50,
) -> tuple[datetime, list[TargetInfo]]:
    """The database's now, and targets by id; ``q`` searches keywords and location; ``state`` is
    ``active``, ``disabled`` or ``due`` (at that now: :meth:`TargetInfo.due_at`)."""
    T, W = ScrapeTarget, Website  # noqa: N806
    async with engine.connect() as conn:
        now = await db_now(conn)
        stmt = TARGET_ROWS.order_by(T.id).limit(limit)
        if q.strip():
            pattern = _like(q.strip().lower())
            stmt = stmt.where(
                or_(
                    func.lower(T.keywords).like(pattern, escape="\\"),
                    func.lower(T.location).like(pattern, escape="\\"),
                )
            )
        if website:
            stmt = stmt.where(W.name == website)
        if state == "active":
            stmt = stmt.where(T.active == true())
        elif state == "disabled":
            stmt = stmt.where(T.active.is_(False))
        elif state == "due":
            stmt = stmt.where(T.active == true(), T.next_run_at <= now)
        if after_id is not None:
            stmt = stmt.where(T.id > after_id)
        rows = (await conn.execute(stmt)).all()
    return now, [target_info(r, r.website_name) for r in rows]


@dataclass(frozen=True, slots=True)
class WebsiteRow:
    """A website as the console shows it (URLs redacted)."""

    id: int
    name: str
    base_url: str
    search_url_template: str
    requires_playwright: bool
    pagination_type: str
    min_delay: float
    max_concurrency: int
    robots_policy: str
    targets: int


async def website_names(engine: AsyncEngine) -> list[str]:
    """Every website's name, sorted (for filters: no counting)."""
    async with engine.connect() as conn:
        return list((await conn.execute(select(Website.name).order_by(Website.name))).scalars())


async def list_websites(engine: AsyncEngine) -> list[WebsiteRow]:
    """Every website with its target count, by name."""
    W, T = Website, ScrapeTarget  # noqa: N806
    counts = select(T.website_id, func.count().label("n")).group_by(T.website_id).subquery()
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(W.id, W.name, W.spec, func.coalesce(counts.c.n, 0))
                .outerjoin(counts, counts.c.website_id == W.id)
                .order_by(W.name)
            )
        ).all()
    return [_website_row(r[0], r[1], r[2], int(r[3])) for r in rows]


def _website_row(website_id: int, name: str, spec: dict[str, Any], targets: int) -> WebsiteRow:
    """A website's listing row, read from its stored ``SiteSpec`` (defaults where the spec is silent)."""
    site = SiteSpec.model_validate(spec)
    return WebsiteRow(
        website_id,
        name,
        redact_url(site.base_url),
        redact_url(site.search_url_template),
        site.requires_playwright,
        site.pagination.type,
        site.politeness.min_delay,
        site.politeness.max_concurrency,
        site.politeness.robots,
        targets,
    )


@dataclass(frozen=True, slots=True)
class WebsiteUsage:
    """What hangs on a website: what deleting it deletes too."""

    id: int
    name: str
    targets: int
    active_targets: int
    runs: int
    items: int


async def website_usage(conn: AsyncConnection, website_id: int) -> WebsiteUsage:
    """Counts of website ``website_id``'s targets, job runs and items (on the caller's connection)."""
    W, T, R, It = Website, ScrapeTarget, JobRun, StoredItem  # noqa: N806
    name = (await conn.execute(select(W.name).where(W.id == website_id))).scalar()
    if name is None:
        raise CrawlherdError(f"no website with id {website_id}")
    mine = T.website_id == website_id
    targets = await count_rows(conn, T, mine)
    active = await count_rows(conn, T, mine, T.active == true())
    runs = await count_rows(conn, R.__table__.join(T.__table__, T.id == R.target_id), mine)
    items = await count_rows(conn, It, It.website_id == website_id)
    return WebsiteUsage(website_id, name, targets, active, runs, items)


async def get_website(engine: AsyncEngine, website_id: int) -> tuple[SiteSpec, WebsiteUsage]:
    """A website's configuration (secrets and all: redact before showing) and what hangs on it."""
    async with engine.connect() as conn:
        usage = await website_usage(conn, website_id)
        spec = (await conn.execute(select(Website.spec).where(Website.id == website_id))).scalar_one()
    return SiteSpec.model_validate(spec), usage


@dataclass(frozen=True, slots=True)
class ItemRow:
    """One stored item as the console shows it: its row ``id``, ``website``, the ``url`` of its page
    (redacted), its ``data``, and when it was ``first_seen`` and ``last_seen``."""

    id: int
    website: str
    url: str
    data: dict[str, Any]
    first_seen: datetime
    last_seen: datetime


async def browse_items(
    engine: AsyncEngine,
    *,
    website: str | None = None,
    q: str = "",
    location: str = "",
    before_id: int | None = None,
    limit: int = 50,
) -> list[ItemRow]:
    """Items, newest first; ``q`` and ``location`` search the item's fields."""
    It, W = StoredItem, Website  # noqa: N806
    stmt = (
        select(It.id, W.name, It.url, It.data, It.first_seen, It.last_seen)
        .join(W, W.id == It.website_id)
        .order_by(It.id.desc())
        .limit(limit)
    )
    if website:
        stmt = stmt.where(W.name == website)
    for term in (q, location):
        if term.strip():
            stmt = stmt.where(func.lower(cast(It.data, String)).like(_like(term.strip().lower()), escape="\\"))
    if before_id is not None:
        stmt = stmt.where(It.id < before_id)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return [ItemRow(r[0], r[1], redact_url(r[2]), r[3], r[4], r[5]) for r in rows]
