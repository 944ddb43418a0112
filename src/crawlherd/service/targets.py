"""Targets files (TOML or YAML) and the operations behind ``crawlherd targets``.

A targets file has two lists: ``websites`` (how to search, paginate, extract, and how politely) and
``targets`` (a website x a list of keywords x a list of locations, each combination one scrape target,
with its schedule). See ``examples/targets.toml``.

Import is all or nothing: the whole file is checked first and every problem is reported (by line when
the format gives one -- YAML -- and always by key and field) in one
:class:`~crawlherd.errors.TargetsFileError`; then everything is written in one transaction. Websites
are upserted by ``name``, targets by (website, keywords, location); nothing that is not in the file is
removed.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy import insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db.engine import db_now
from crawlherd.db.models import ScrapeTarget, Website
from crawlherd.errors import (
    BackendUnavailableError,
    ConfigurationError,
    CrawlherdError,
    ScheduleError,
    TargetsFileError,
)
from crawlherd.extract.pagination import Pagination
from crawlherd.extract.rules import ExtractionRules
from crawlherd.service.schedule import (
    Schedule,
    format_duration,
    jitter_for,
    make_schedule,
    parse_duration,
    upcoming,
)
from crawlherd.service.search_url import template_problems

__all__ = [
    "ImportResult",
    "TargetInfo",
    "TargetsFile",
    "get_target",
    "import_targets",
    "list_targets",
    "load_targets_file",
    "parse_targets",
    "preview_target",
    "set_active",
]

_ONE_SCHEDULE = "give exactly one of 'every' (an interval such as '6h') or 'cron' ('30 7 * * 1-5')"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


def _duration(value: Any) -> float:
    try:
        return parse_duration(value).total_seconds()
    except ScheduleError as exc:
        raise ValueError(str(exc)) from None


class PaginationSpec(BaseModel):
    """``type``: none | next_link (needs ``selector``) | page_param (``param``, ``start``); ``max_pages``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["none", "next_link", "page_param"] = "none"
    selector: str | None = None
    param: str = "page"
    start: int = Field(default=1, ge=0)
    step: int = Field(default=1, ge=1)
    max_pages: int = Field(default=10, ge=1, le=10_000)

    @model_validator(mode="after")
    def _needs(self) -> PaginationSpec:
        if self.type == "next_link" and not self.selector:
            raise ValueError("pagination type next_link needs a 'selector' (the CSS selector of the next link)")
        return self


class PolitenessSpec(BaseModel):
    """Per-site politeness: ``min_delay`` between requests, ``max_concurrency``, ``robots`` obey|ignore."""

    model_config = ConfigDict(extra="forbid")

    min_delay: float = 1.0
    max_concurrency: int = Field(default=2, ge=1, le=1000)
    robots: Literal["obey", "ignore"] = "obey"

    _min_delay = field_validator("min_delay", mode="before")(classmethod(lambda cls, v: _duration(v)))


class WebsiteSpec(BaseModel):
    """One ``[[websites]]`` entry."""

    model_config = ConfigDict(extra="forbid")

    name: str
    base_url: str
    search_url_template: str
    requires_playwright: bool = False
    pagination: PaginationSpec = Field(default_factory=lambda: PaginationSpec())
    extraction: dict[str, Any] = Field(default_factory=dict)
    politeness: PolitenessSpec = Field(default_factory=lambda: PolitenessSpec())
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be 1-200 letters, digits, '_', '.' or '-', starting with a letter or digit")
        return value

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str) -> str:
        if not value.lower().startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @field_validator("search_url_template")
    @classmethod
    def _template(cls, value: str) -> str:
        problems = template_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _rules(self) -> WebsiteSpec:
        # The very checks the worker makes, so that a bad selector is refused here, not at 3 a.m.
        # (No extraction rules is allowed: a Python handler may be registered under the name.)
        try:
            if self.extraction:
                ExtractionRules.from_mapping(self.name, self.extraction)
            Pagination.from_table(self.pagination.model_dump(), website=self.name)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return self


class TargetSpec(BaseModel):
    """One ``[[targets]]`` entry: ``website`` x ``keywords`` x ``locations`` with one schedule."""

    model_config = ConfigDict(extra="forbid")

    website: str
    keywords: list[str] = Field(min_length=1)
    locations: list[str] = Field(default_factory=lambda: [""])
    every: float | None = None
    cron: str | None = None
    timezone: str = "UTC"
    start_at: datetime | None = None
    jitter: float = 0.0
    misfire: Literal["skip", "latest", "backfill"] = "skip"
    backfill_limit: int = Field(default=0, ge=0, le=10_000)
    misfire_grace: float = 60.0
    active: bool = True

    _durations = field_validator("every", "jitter", "misfire_grace", mode="before")(
        classmethod(lambda cls, v: None if v is None else _duration(v))
    )

    @field_validator("keywords")
    @classmethod
    def _keywords(cls, value: list[str]) -> list[str]:
        cleaned = [k.strip() for k in value]
        if not all(cleaned):
            raise ValueError("keywords must not be empty strings")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("keywords are listed twice")
        return cleaned

    @field_validator("locations")
    @classmethod
    def _locations(cls, value: list[str]) -> list[str]:
        cleaned = [loc.strip() for loc in value] or [""]
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("locations are listed twice")
        return cleaned

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                make_schedule(kind="cron", cron=value)
            except ScheduleError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            make_schedule(kind="cron", cron="0 0 * * *", timezone=value)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("start_at")
    @classmethod
    def _start(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("must carry a time zone offset, e.g. 2026-01-01T07:00:00+01:00")
        return value

    @model_validator(mode="after")
    def _schedule(self) -> TargetSpec:
        if (self.every is None) == (self.cron is None):
            raise ValueError(_ONE_SCHEDULE)
        if self.every is not None and self.every < 1:
            raise ValueError("'every' must be at least 1s")
        try:
            make_schedule(**self.schedule_fields())
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
        if self.every is not None and self.jitter >= self.every:
            raise ValueError(f"'jitter' ({self.jitter:g}s) must be smaller than 'every' ({self.every:g}s)")
        if self.misfire == "backfill" and self.backfill_limit < 1:
            raise ValueError("misfire 'backfill' needs 'backfill_limit' >= 1 (how many missed runs to catch up)")
        return self

    def schedule_fields(self) -> dict[str, Any]:
        return {
            "kind": "interval" if self.every is not None else "cron",
            "interval_seconds": self.every,
            "cron": self.cron,
            "timezone": self.timezone,
            "anchor_at": self.start_at.astimezone(UTC) if self.start_at else None,
        }


@dataclass(frozen=True, slots=True)
class TargetsFile:
    """A validated targets file."""

    path: str
    websites: tuple[WebsiteSpec, ...]
    targets: tuple[TargetSpec, ...]


# -- parsing and validation -----------------------------------------------------------------------


def _yaml_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Map each key path of a YAML document to its (1-based) line."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value
                lines[(*path, name)] = key.start_mark.line + 1
                walk(value, (*path, name))
                lines[(*path, name)] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, index))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def _where(path: Sequence[Any], lines: Mapping[tuple[Any, ...], int]) -> str:
    key = ""
    for part in path:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    key = key or "(file)"
    for cut in range(len(path), -1, -1):
        line = lines.get(tuple(path[:cut]))
        if line is not None and (cut or not path):
            return f"line {line}, {key}"
    return key


def parse_targets(
    text: str,
    *,
    path: str = "<targets>",
    fmt: Literal["toml", "yaml"] | None = None,
    known_websites: Set[str] = frozenset(),
) -> TargetsFile:
    """Validate a targets document; raise :class:`TargetsFileError` listing every problem.

    A target may name a website defined in the file or one of ``known_websites`` (those already in
    the database)."""
    fmt = fmt or ("yaml" if path.lower().endswith((".yaml", ".yml")) else "toml")
    lines: dict[tuple[Any, ...], int] = {}
    try:
        if fmt == "toml":
            data: Any = tomllib.loads(text)
        else:
            data = yaml.safe_load(text)
            lines = _yaml_lines(text)
    except tomllib.TOMLDecodeError as exc:
        raise TargetsFileError(path, [("(file)", f"not valid TOML: {exc}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        raise TargetsFileError(path, [(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TargetsFileError(path, [("(file)", "the file must hold 'websites' and 'targets' lists")])
    problems: list[tuple[str, str]] = []
    for key in data:
        if key not in ("websites", "targets"):
            problems.append((_where([key], lines), "unknown section; a targets file has 'websites' and 'targets'"))
    sites: list[WebsiteSpec] = []
    targets: list[TargetSpec] = []
    for section in ("websites", "targets"):
        items = data.get(section, [])
        if not isinstance(items, list):
            problems.append((_where([section], lines), f"must be a list ([[{section}]] in TOML, '- ...' in YAML)"))
            continue
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                problems.append((_where([section, index], lines), "must be a table/mapping"))
                continue
            try:
                if section == "websites":
                    sites.append(WebsiteSpec.model_validate(item))
                else:
                    targets.append(TargetSpec.model_validate(item))
            except ValidationError as exc:
                for err in exc.errors():
                    loc = [section, index, *err["loc"]]
                    problems.append((_where(loc, lines), _message(err)))
                reported = any(_ONE_SCHEDULE in str(err["msg"]) for err in exc.errors())
                if section == "targets" and ("every" in item) == ("cron" in item) and not reported:
                    # The whole-entry check did not run because a field failed: report it anyway.
                    problems.append((_where([section, index], lines), _ONE_SCHEDULE))
            if section == "targets" and isinstance(item.get("website"), str):
                defined = {w.get("name") for w in data.get("websites", []) if isinstance(w, dict)}
                if item["website"] not in defined and item["website"] not in known_websites:
                    problems.append(
                        (
                            _where([section, index, "website"], lines),
                            f"no website named {item['website']!r} in this file or in the database",
                        )
                    )
    if not data.get("targets") and not data.get("websites"):
        problems.append(("(file)", "nothing to import: no websites and no targets"))
    seen: dict[str, int] = {}
    for index, site in enumerate(sites):
        if site.name in seen:
            problems.append((_where(["websites", index, "name"], lines), f"website {site.name!r} is defined twice"))
        seen[site.name] = index
    # Duplicates are checked on the raw entries, so an entry with another problem is still compared.
    combos: dict[tuple[str, str, str], int] = {}
    raw_targets = data.get("targets", [])
    for index, item in enumerate(raw_targets if isinstance(raw_targets, list) else []):
        if not isinstance(item, dict):
            continue
        keywords, places = item.get("keywords", []), item.get("locations", [""]) or [""]
        if not isinstance(keywords, list) or not isinstance(places, list):
            continue
        for kw in {k.strip() for k in keywords if isinstance(k, str)}:
            for place in {p.strip() for p in places if isinstance(p, str)}:
                combo = (str(item.get("website")), kw, place)
                if combo in combos:
                    problems.append(
                        (
                            _where(["targets", index], lines),
                            f"target {kw!r} x {place or '(no location)'!r} on {combo[0]!r} "
                            f"is already defined by targets[{combos[combo]}]",
                        )
                    )
                    break
                combos[combo] = index
    if problems:
        raise TargetsFileError(path, problems)
    return TargetsFile(path, tuple(sites), tuple(targets))


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling)"
    return msg


def load_targets_file(path: str | Path, *, known_websites: Set[str] = frozenset()) -> TargetsFile:
    """Read and validate a ``.toml``, ``.yaml`` or ``.yml`` targets file."""
    p = Path(path)
    if p.suffix.lower() not in (".toml", ".yaml", ".yml"):
        raise TargetsFileError(str(p), [("(file)", "use a .toml, .yaml or .yml file")])
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetsFileError(str(p), [("(file)", f"cannot read it: {exc}")]) from None
    return parse_targets(text, path=str(p), known_websites=known_websites)


# -- import ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import changed."""

    websites_created: int = 0
    websites_updated: int = 0
    targets_created: int = 0
    targets_updated: int = 0
    targets_unchanged: int = 0


def _first_run(schedule: Schedule, now: datetime, jitter: timedelta) -> datetime:
    """The first run of a new or rescheduled target: its first slot whose run time is after ``now``."""
    return schedule.next_after(now - jitter) + jitter


async def import_targets(engine: AsyncEngine, source: TargetsFile | str | Path) -> ImportResult:
    """Write a targets file into the config DB in one transaction (all or nothing)."""
    try:
        async with engine.begin() as conn:
            if isinstance(source, TargetsFile):
                spec = source
            else:
                names = set((await conn.execute(select(Website.name))).scalars())
                spec = load_targets_file(source, known_websites=names)
            return await _import(conn, spec)
    except CrawlherdError:
        raise
    except SQLAlchemyError as exc:
        raise TargetsFileError(str(source), [("(database)", f"nothing imported: {_short(exc)}")]) from exc
    except OSError as exc:
        raise BackendUnavailableError(f"config DB unavailable: {exc}", backend="database") from exc


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
        values = {
            "base_url": site.base_url,
            "search_url_template": site.search_url_template,
            "requires_playwright": site.requires_playwright,
            "pagination_type": site.pagination.type,
            "pagination": site.pagination.model_dump(exclude={"type"}),
            "extraction": site.extraction,
            "site_metadata": site.metadata,
            "min_delay": site.politeness.min_delay,
            "max_concurrency": site.politeness.max_concurrency,
            "robots_policy": site.politeness.robots,
            "updated_at": now,
        }
        if site.name in existing:
            await conn.execute(update(Website).where(Website.id == existing[site.name]).values(**values))
            updated += 1
        else:
            result = await conn.execute(insert(Website).values(name=site.name, created_at=now, **_columns(values)))
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


def _columns(values: Mapping[str, Any]) -> dict[str, Any]:
    """ORM attribute names -> column names for Core inserts."""
    return {("metadata" if k == "site_metadata" else k): v for k, v in values.items()}


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


def _info(target: Any, website: str) -> TargetInfo:
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
    stmt = select(ScrapeTarget, Website.name).join(Website).order_by(ScrapeTarget.id)
    if website:
        stmt = stmt.where(Website.name == website)
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(*ScrapeTarget.__table__.c, Website.name.label("website_name"))
                .join(Website)
                .order_by(ScrapeTarget.id)
                .where(*([Website.name == website] if website else []))
            )
        ).all()
    return [_info(row, row.website_name) for row in rows]


async def get_target(engine: AsyncEngine, target_id: int) -> TargetInfo:
    """One target; :class:`CrawlherdError` when there is none with that id."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(*ScrapeTarget.__table__.c, Website.name.label("website_name"))
                .join(Website)
                .where(ScrapeTarget.id == target_id)
            )
        ).first()
    if row is None:
        raise CrawlherdError(f"no scrape target with id {target_id} (see `crawlherd targets list`)")
    return _info(row, row.website_name)


async def set_active(engine: AsyncEngine, target_id: int, active: bool) -> TargetInfo:
    """Enable or disable a target. Enabling starts it from its next future slot (missed slots are not
    made up: the target was off on purpose)."""
    async with engine.begin() as conn:
        now = await db_now(conn)
        row = (await conn.execute(select(*ScrapeTarget.__table__.c).where(ScrapeTarget.id == target_id))).first()
        if row is None:
            raise CrawlherdError(f"no scrape target with id {target_id} (see `crawlherd targets list`)")
        values: dict[str, Any] = {"active": active, "updated_at": now}
        if active and not row.active:
            schedule = make_schedule(
                kind=row.schedule_kind,
                interval_seconds=row.interval_seconds,
                cron=row.cron,
                timezone=row.timezone,
                anchor_at=row.anchor_at,
            )
            values["next_run_at"] = _first_run(schedule, now, timedelta(milliseconds=row.jitter_ms))
        await conn.execute(update(ScrapeTarget).where(ScrapeTarget.id == target_id).values(**values))
    return await get_target(engine, target_id)


async def preview_target(engine: AsyncEngine, target_id: int, count: int = 10) -> list[tuple[datetime, datetime]]:
    """The next ``count`` (slot, run time) pairs of a target, starting with its pending ``next_run_at``."""
    if count < 1:
        raise CrawlherdError("--next must be at least 1")
    async with engine.connect() as conn:
        row = (await conn.execute(select(*ScrapeTarget.__table__.c).where(ScrapeTarget.id == target_id))).first()
    if row is None:
        raise CrawlherdError(f"no scrape target with id {target_id} (see `crawlherd targets list`)")
    jitter = timedelta(milliseconds=row.jitter_ms)
    schedule = make_schedule(
        kind=row.schedule_kind,
        interval_seconds=row.interval_seconds,
        cron=row.cron,
        timezone=row.timezone,
        anchor_at=row.anchor_at,
    )
    first = row.next_run_at - jitter
    slots = [first, *upcoming(schedule, after=first, count=count - 1)]
    return [(slot, slot + jitter) for slot in slots]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
