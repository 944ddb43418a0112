"""The operations behind ``crawlherd targets`` on the config DB: import a targets file, list, show,
enable, disable, preview. The file itself -- its entries and their validation -- is
:mod:`crawlherd.dispatch.targets_file`.

Import is all or nothing: the whole file is checked first (:func:`~crawlherd.dispatch.targets_file.parse_targets`),
then everything is written in one transaction. Websites are upserted by ``name`` (the whole
:class:`~crawlherd.sitespec.SiteSpec` stored in ``websites.spec``), targets by (website, keywords,
location); nothing that is not in the file is removed unless ``prune=True`` (then the targets that are
not in the file are deleted, with their pending jobs and run history; their items stay).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db.engine import db_now
from crawlherd.db.models import ScrapeTarget, Website
from crawlherd.dispatch.schedule import Schedule, jitter_for, make_schedule, schedule_of, upcoming
from crawlherd.dispatch.targets_file import TargetsFile, load_targets_file
from crawlherd.duration import format_duration
from crawlherd.errors import BackendUnavailableError, CrawlherdError, TargetsFileError

__all__ = [
    "TARGET_ROWS",
    "ImportResult",
    "TargetInfo",
    "delete_targets",
    "get_target",
    "import_targets",
    "list_targets",
    "preview_target",
    "set_active",
    "set_website_active",
    "target_info",
]


# -- import ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import changed."""

    websites_created: int = 0
    websites_updated: int = 0
    targets_created: int = 0
    targets_updated: int = 0
    targets_unchanged: int = 0
    #: The targets not in the file: deleted with ``prune=True`` (listed only with ``dry_run=True``).
    pruned: tuple[TargetInfo, ...] = ()


def _first_run(schedule: Schedule, now: datetime, jitter: timedelta) -> datetime:
    """The first run of a new or rescheduled target: its first slot whose run time is after ``now``."""
    return schedule.next_after(now - jitter) + jitter


class _DryRun(Exception):
    """Rolls back a dry run's transaction, carrying what it would have done."""

    def __init__(self, result: ImportResult) -> None:
        super().__init__("dry run")
        self.result = result


async def import_targets(
    engine: AsyncEngine, source: TargetsFile | str | Path, *, prune: bool = False, dry_run: bool = False
) -> ImportResult:
    """Write a targets file into the config DB in one transaction (all or nothing). ``prune``: also
    delete the targets that are not in the file. ``dry_run``: do it all, report it, and roll back."""
    try:
        return await _import_in_transaction(engine, source, prune=prune, dry_run=dry_run)
    except _DryRun as done:
        return done.result


async def _import_in_transaction(
    engine: AsyncEngine, source: TargetsFile | str | Path, *, prune: bool, dry_run: bool
) -> ImportResult:
    try:
        async with engine.begin() as conn:
            if isinstance(source, TargetsFile):
                spec = source
            else:
                names = set((await conn.execute(select(Website.name))).scalars())
                spec = load_targets_file(source, known_websites=names)
            result = await _import(conn, spec)
            if prune:
                result = dataclasses.replace(result, pruned=await _prune(conn, spec))
            if dry_run:
                raise _DryRun(result)
            return result
    except CrawlherdError:
        raise
    except SQLAlchemyError as exc:
        raise TargetsFileError(str(source), [("(database)", f"nothing imported: {_short(exc)}")]) from exc
    except OSError as exc:
        raise BackendUnavailableError(f"config DB unavailable: {exc}", backend="database", role="database") from exc


async def _import(conn: AsyncConnection, spec: TargetsFile) -> ImportResult:
    now = await db_now(conn)
    existing = {row.name: row.id for row in (await conn.execute(select(Website.name, Website.id))).all()}
    missing = [
        (f"targets[{i}].website", f"no website named {t.website!r} in this file or in the database")
        for i, t in enumerate(spec.targets)
        if t.website not in existing and t.website not in {w.name for w in spec.websites}
    ]
    if missing:
        raise TargetsFileError(spec.path, missing)
    created = updated = 0
    for site in spec.websites:
        values = {"spec": site.model_dump(mode="json"), "updated_at": now}
        if site.name in existing:
            await conn.execute(update(Website).where(Website.id == existing[site.name]).values(**values))
            updated += 1
        else:
            result = await conn.execute(insert(Website).values(name=site.name, created_at=now, **values))
            existing[site.name] = int(result.inserted_primary_key[0])  # type: ignore[index]
            created += 1
    t_created = t_updated = t_same = 0
    for target in spec.targets:
        website_id = existing[target.website]
        sched = target.schedule_fields()
        schedule = make_schedule(**sched)
        for kw in target.keywords:
            for loc in target.locations:
                jitter_ms = int(
                    jitter_for(f"{target.website}|{kw}|{loc}", timedelta(seconds=target.jitter))
                    / timedelta(milliseconds=1)
                )
                values = {
                    "schedule_kind": sched["kind"],
                    "interval_seconds": sched["interval_seconds"],
                    "cron": sched["cron"],
                    "timezone": sched["timezone"],
                    "anchor_at": sched["anchor_at"],
                    "jitter_ms": jitter_ms,
                    "misfire_policy": target.misfire,
                    "backfill_limit": target.backfill_limit,
                    "misfire_grace_seconds": target.misfire_grace,
                    "active": target.active,
                }
                current = (
                    await conn.execute(
                        select(ScrapeTarget).where(
                            ScrapeTarget.website_id == website_id,
                            ScrapeTarget.keywords == kw,
                            ScrapeTarget.location == loc,
                        )
                    )
                ).first()
                first_run = _first_run(schedule, now, timedelta(milliseconds=jitter_ms))
                if current is None:
                    await conn.execute(
                        insert(ScrapeTarget).values(
                            website_id=website_id,
                            keywords=kw,
                            location=loc,
                            next_run_at=first_run,
                            created_at=now,
                            updated_at=now,
                            **values,
                        )
                    )
                    t_created += 1
                    continue
                row = current._mapping
                changed = {k: v for k, v in values.items() if row[k] != v}
                if not changed:
                    t_same += 1
                    continue
                timing = {"schedule_kind", "interval_seconds", "cron", "timezone", "anchor_at", "jitter_ms"}
                if timing & changed.keys() or (changed.get("active") and not row["active"]):
                    values["next_run_at"] = first_run  # a new schedule starts from now, not from the old slots
                await conn.execute(
                    update(ScrapeTarget).where(ScrapeTarget.id == row["id"]).values(updated_at=now, **values)
                )
                t_updated += 1
    return ImportResult(created, updated, t_created, t_updated, t_same)


#: Every column of the targets, with their website's name (``website_name``).
TARGET_ROWS = select(*ScrapeTarget.__table__.c, Website.name.label("website_name")).join(Website)


async def _prune(conn: AsyncConnection, spec: TargetsFile) -> tuple[TargetInfo, ...]:
    """Delete the targets whose (website, keywords, location) the file does not list."""
    wanted = {(t.website, kw, loc) for t in spec.targets for kw in t.keywords for loc in t.locations}
    rows = (await conn.execute(TARGET_ROWS)).all()
    gone = [
        target_info(row, row.website_name)
        for row in rows
        if (row.website_name, row.keywords, row.location) not in wanted
    ]
    if gone:
        await conn.execute(delete(ScrapeTarget).where(ScrapeTarget.id.in_([t.id for t in gone])))
    return tuple(sorted(gone, key=lambda t: t.id))


async def delete_targets(engine: AsyncEngine, target_ids: Sequence[int]) -> list[TargetInfo]:
    """Delete these targets (with their pending jobs and run history; their items stay), all or none:
    an unknown id deletes nothing and raises :class:`~crawlherd.errors.CrawlherdError`."""
    async with engine.begin() as conn:
        rows = (
            await conn.execute(
                TARGET_ROWS.where(ScrapeTarget.id.in_(list(target_ids))))
        ).all()
        found = {row.id for row in rows}
        unknown = sorted(set(target_ids) - found)
        if unknown:
            raise CrawlherdError(
                f"no target {', '.join(map(str, unknown))}: nothing deleted (see `crawlherd targets list`)"
            )
        await conn.execute(delete(ScrapeTarget).where(ScrapeTarget.id.in_(list(found))))
    return sorted((target_info(row, row.website_name) for row in rows), key=lambda t: t.id)


# -- listing and editing --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """A scrape target with its website's name, for ``targets list`` / ``show``."""

    id: int
    website: str
    keywords: str
    location: str
    schedule: str
    timezone: str
    jitter_ms: int
    misfire: str
    active: bool
    last_scheduled: datetime | None
    next_run_at: datetime
    details: dict[str, Any]

    def due_at(self, now: datetime) -> bool:
        """Active and its next run is at or before ``now``."""
        return self.active and self.next_run_at <= now


def target_info(target: Any, website: str) -> TargetInfo:
    """A target row (all its columns; e.g. of :data:`TARGET_ROWS`) as a :class:`TargetInfo`."""
    schedule = (
        f"every {format_duration(target.interval_seconds)}"
        if target.schedule_kind == "interval"
        else f"cron {target.cron}"
    )
    misfire = target.misfire_policy + (f"({target.backfill_limit})" if target.misfire_policy == "backfill" else "")
    details = {c: getattr(target, c) for c in ("anchor_at", "misfire_grace_seconds", "created_at", "updated_at")}
    return TargetInfo(
        target.id,
        website,
        target.keywords,
        target.location,
        schedule,
        target.timezone,
        target.jitter_ms,
        misfire,
        target.active,
        target.last_scheduled,
        target.next_run_at,
        details,
    )


async def list_targets(engine: AsyncEngine, *, website: str | None = None) -> list[TargetInfo]:
    """Every target (optionally of one website), by id."""
    stmt = TARGET_ROWS.order_by(ScrapeTarget.id)
    if website:
        stmt = stmt.where(Website.name == website)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return [target_info(row, row.website_name) for row in rows]


async def get_target(engine: AsyncEngine, target_id: int) -> TargetInfo:
    """One target; :class:`CrawlherdError` when there is none with that id."""
    async with engine.connect() as conn:
        row = (await conn.execute(TARGET_ROWS.where(ScrapeTarget.id == target_id))).first()
    if row is None:
        raise CrawlherdError(f"no scrape target with id {target_id} (see `crawlherd targets list`)")
    return target_info(row, row.website_name)


async def set_active(engine: AsyncEngine, target_id: int, active: bool) -> TargetInfo:
    """Enable or disable a target. Enabling starts it from its next future slot (missed slots are not
    made up: the target was off on purpose)."""
    await _set_active_where(engine, ScrapeTarget.id == target_id, active)
    return await get_target(engine, target_id)  # raises when there is no such target


async def set_website_active(engine: AsyncEngine, website_id: int, active: bool) -> int:
    """Enable or disable every target of a website, as :func:`set_active` does one; returns how many
    changed state."""
    async with engine.connect() as conn:
        if (await conn.execute(select(Website.id).where(Website.id == website_id))).first() is None:
            raise CrawlherdError(f"no website with id {website_id}")
    return await _set_active_where(engine, ScrapeTarget.website_id == website_id, active)


async def _set_active_where(engine: AsyncEngine, where: Any, active: bool) -> int:
    """Set ``active`` on the targets ``where`` selects; the ones enabled now start from their next slot
    (computed per target). Returns how many changed state."""
    changing = (where, ScrapeTarget.active != active)
    async with engine.begin() as conn:
        now = await db_now(conn)
        if not active:
            done = await conn.execute(update(ScrapeTarget).where(*changing).values(active=False, updated_at=now))
            return int(done.rowcount or 0)
        rows = (await conn.execute(select(*ScrapeTarget.__table__.c).where(*changing))).all()
        for row in rows:
            first = _first_run(schedule_of(row), now, timedelta(milliseconds=row.jitter_ms))
            values = {"active": True, "updated_at": now, "next_run_at": first}
            await conn.execute(update(ScrapeTarget).where(ScrapeTarget.id == row.id).values(**values))
    return len(rows)


async def preview_target(engine: AsyncEngine, target_id: int, count: int = 10) -> list[tuple[datetime, datetime]]:
    """The next ``count`` (slot, run time) pairs of a target, starting with its pending ``next_run_at``."""
    if count < 1:
        raise CrawlherdError("--next must be at least 1")
    async with engine.connect() as conn:
        row = (await conn.execute(select(*ScrapeTarget.__table__.c).where(ScrapeTarget.id == target_id))).first()
    if row is None:
        raise CrawlherdError(f"no scrape target with id {target_id} (see `crawlherd targets list`)")
    jitter = timedelta(milliseconds=row.jitter_ms)
    schedule = schedule_of(row)
    first = row.next_run_at - jitter
    slots = [first, *upcoming(schedule, after=first, count=count - 1)]
    return [(slot, slot + jitter) for slot in slots]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
