"""Changes made from the console, each validated like a targets file and recorded in the audit trail:
a website or a target is saved through the same all-or-nothing import as ``crawlherd targets import``."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.engine import db_now
from crawlherd.db.models import ScrapeTarget, Website
from crawlherd.errors import CrawlherdError
from crawlherd.service.audit import record
from crawlherd.service.targets import ImportResult, TargetInfo, import_targets, set_active
from crawlherd.service.targets_file import TargetsFile, TargetSpec, parse_targets
from crawlherd.sitespec import SiteSpec

__all__ = [
    "FormError",
    "delete_target",
    "import_text",
    "save_target",
    "save_website",
    "set_target_active",
    "update_politeness",
]


class FormError(CrawlherdError):
    """A form's values are invalid: ``problems`` maps each field to its message."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))
        self.problems = problems


def _problems(exc: ValidationError) -> dict[str, str]:
    out: dict[str, str] = {}
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "form"
        out.setdefault(key, str(err["msg"]).removeprefix("Value error, "))
    return out


async def save_website(engine: AsyncEngine, values: dict[str, Any], *, actor: str) -> ImportResult:
    """Create (or replace) a website from form ``values`` (the keys of a ``[[websites]]`` entry)."""
    try:
        spec = SiteSpec.model_validate(values)
    except ValidationError as exc:
        raise FormError(_problems(exc)) from None
    result = await import_targets(engine, TargetsFile("<console>", (spec,), ()))
    async with engine.begin() as conn:
        await record(conn, actor=actor, action="website.save", subject=f"website:{spec.name}")
    return result


async def save_target(engine: AsyncEngine, values: dict[str, Any], *, actor: str) -> ImportResult:
    """Create or update the target(s) of form ``values`` (the keys of a ``[[targets]]`` entry)."""
    try:
        spec = TargetSpec.model_validate(values)
    except ValidationError as exc:
        raise FormError(_problems(exc)) from None
    result = await import_targets(engine, TargetsFile("<console>", (), (spec,)))
    async with engine.begin() as conn:
        await record(
            conn, actor=actor, action="target.save", subject=f"website:{spec.website}",
            detail={"keywords": spec.keywords, "locations": spec.locations},
        )
    return result


async def import_text(engine: AsyncEngine, text: str, *, filename: str, actor: str) -> ImportResult:
    """Import a whole targets document (TOML or YAML by ``filename``), all or nothing."""
    async with engine.connect() as conn:
        names = set((await conn.execute(select(Website.name))).scalars())
    spec = parse_targets(text, path=filename, known_websites=names)
    result = await import_targets(engine, spec)
    async with engine.begin() as conn:
        await record(
            conn, actor=actor, action="targets.import", subject=filename[:200],
            detail={"targets_created": result.targets_created, "targets_updated": result.targets_updated},
        )
    return result


async def set_target_active(engine: AsyncEngine, target_id: int, active: bool, *, actor: str) -> TargetInfo:
    """Enable or disable a target."""
    info = await set_active(engine, target_id, active)
    async with engine.begin() as conn:
        await record(conn, actor=actor, action="target.enable" if active else "target.disable",
                     subject=f"target:{target_id}")
    return info


async def delete_target(engine: AsyncEngine, target_id: int, *, actor: str) -> None:
    """Delete a target (its outbox rows and runs go with it)."""
    async with engine.begin() as conn:
        gone = (await conn.execute(delete(ScrapeTarget).where(ScrapeTarget.id == target_id))).rowcount
        if not gone:
            raise CrawlherdError(f"no scrape target with id {target_id}")
        await record(conn, actor=actor, action="target.delete", subject=f"target:{target_id}")


async def update_politeness(
    engine: AsyncEngine, website_id: int, *, min_delay: float, max_concurrency: int, robots_policy: str,
    requires_playwright: bool, actor: str,
) -> None:
    """Change a website's politeness and browser flag (the jobs dispatched from now on carry it)."""
    async with engine.begin() as conn:
        now = await db_now(conn)
        stored = (await conn.execute(select(Website.spec).where(Website.id == website_id))).scalar()
        if stored is None:
            raise CrawlherdError(f"no website with id {website_id}")
        changed = {
            **stored,
            "requires_playwright": requires_playwright,
            "politeness": {"min_delay": min_delay, "max_concurrency": max_concurrency, "robots": robots_policy},
        }
        try:  # the one set of rules a website's configuration obeys, wherever it is edited
            site = SiteSpec.model_validate(changed)
        except ValidationError as exc:
            raise FormError({k.removeprefix("politeness."): v for k, v in _problems(exc).items()}) from None
        await conn.execute(
            update(Website).where(Website.id == website_id).values(spec=site.model_dump(mode="json"), updated_at=now)
        )
        await record(
            conn, actor=actor, action="website.politeness", subject=f"website:{website_id}",
            detail={"min_delay": min_delay, "max_concurrency": max_concurrency, "robots": robots_policy},
        )
