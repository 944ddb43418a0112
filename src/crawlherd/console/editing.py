"""Changes made from the console, each validated like a targets file and recorded in the audit trail:
a new website or target is saved through the same all-or-nothing import as ``crawlherd targets import``;
a website's edit is validated by the same :class:`~crawlherd.sitespec.SiteSpec`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.console.audit import record
from crawlherd.console.browse import WebsiteUsage, website_usage
from crawlherd.db.engine import db_now
from crawlherd.db.models import ScrapeTarget, Website
from crawlherd.dispatch.targets import ImportResult, TargetInfo, import_targets, set_active
from crawlherd.dispatch.targets import set_website_active as set_website_targets_active
from crawlherd.dispatch.targets_file import TargetsFile, TargetSpec, parse_targets
from crawlherd.errors import CrawlherdError
from crawlherd.sitespec import SiteSpec

__all__ = [
    "FormError",
    "delete_target",
    "import_text",
    "save_target",
    "save_website",
    "delete_website",
    "set_target_active",
    "set_website_active",
    "update_website",
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


_M = TypeVar("_M", bound=BaseModel)


def _validated(model: type[_M], values: dict[str, Any]) -> _M:
    """``values`` as a ``model`` (a file entry's rules, wherever it is edited); FormError by field."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise FormError(_problems(exc)) from None


async def _import(
    engine: AsyncEngine, spec: TargetsFile, *, actor: str, action: str, subject: str,
    detail: Callable[[ImportResult], dict[str, Any]] | None = None,
) -> ImportResult:
    """The targets-file import of ``spec`` (all or nothing), then its audit entry (``detail``: what
    to record of the result)."""
    result = await import_targets(engine, spec)
    async with engine.begin() as conn:
        await record(conn, actor=actor, action=action, subject=subject, detail=detail(result) if detail else None)
    return result


async def save_website(engine: AsyncEngine, values: dict[str, Any], *, actor: str) -> ImportResult:
    """Create (or replace) a website from form ``values`` (the keys of a ``[[websites]]`` entry)."""
    spec = _validated(SiteSpec, values)
    return await _import(
        engine, TargetsFile("<console>", (spec,), ()), actor=actor, action="website.save",
        subject=f"website:{spec.name}",
    )


async def save_target(engine: AsyncEngine, values: dict[str, Any], *, actor: str) -> ImportResult:
    """Create or update the target(s) of form ``values`` (the keys of a ``[[targets]]`` entry)."""
    spec = _validated(TargetSpec, values)
    return await _import(
        engine, TargetsFile("<console>", (), (spec,)), actor=actor, action="target.save",
        subject=f"website:{spec.website}", detail=lambda _: {"keywords": spec.keywords, "locations": spec.locations},
    )


async def import_text(engine: AsyncEngine, text: str, *, filename: str, actor: str) -> ImportResult:
    """Import a whole targets document (TOML or YAML by ``filename``), all or nothing."""
    async with engine.connect() as conn:
        names = set((await conn.execute(select(Website.name))).scalars())
    spec = parse_targets(text, path=filename, known_websites=names)
    return await _import(
        engine, spec, actor=actor, action="targets.import", subject=filename[:200],
        detail=lambda r: {"targets_created": r.targets_created, "targets_updated": r.targets_updated},
    )


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


async def update_website(engine: AsyncEngine, website_id: int, values: dict[str, Any], *, actor: str) -> SiteSpec:
    """Replace website ``website_id``'s configuration with form ``values`` (the keys of a
    ``[[websites]]`` entry but ``name``, which stays: targets files name it). The jobs dispatched from
    now on carry the new configuration."""
    async with engine.begin() as conn:
        now = await db_now(conn)
        row = (await conn.execute(select(Website.name, Website.spec).where(Website.id == website_id))).first()
        if row is None:
            raise CrawlherdError(f"no website with id {website_id}")
        site = _validated(SiteSpec, {**values, "name": row.name})
        new = site.model_dump(mode="json")
        await conn.execute(update(Website).where(Website.id == website_id).values(spec=new, updated_at=now))
        fields = sorted(k for k in new if new[k] != row.spec.get(k))
        await record(conn, actor=actor, action="website.update", subject=f"website:{website_id}",
                     detail={"name": row.name, "changed": fields})
    return site


async def set_website_active(engine: AsyncEngine, website_id: int, active: bool, *, actor: str) -> int:
    """Enable or disable every target of a website; returns how many changed."""
    changed = await set_website_targets_active(engine, website_id, active)
    async with engine.begin() as conn:
        await record(conn, actor=actor, action="website.enable" if active else "website.disable",
                     subject=f"website:{website_id}", detail={"targets_changed": changed})
    return changed


async def delete_website(engine: AsyncEngine, website_id: int, *, confirm: str, actor: str) -> WebsiteUsage:
    """Delete a website, and with it its targets (their outbox rows, job runs and run-now records) and
    its items: ``confirm`` must be its name. Returns what was deleted."""
    async with engine.begin() as conn:
        usage = await website_usage(conn, website_id)
        if confirm.strip() != usage.name:
            raise FormError({"confirm": f"type the website's name ({usage.name}) to delete it"})
        await conn.execute(delete(Website).where(Website.id == website_id))
        await record(conn, actor=actor, action="website.delete", subject=f"website:{website_id}",
                     detail={"name": usage.name, "targets": usage.targets, "items": usage.items, "runs": usage.runs})
    return usage
