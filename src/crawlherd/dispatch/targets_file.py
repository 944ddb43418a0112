"""Targets files (TOML or YAML): their entries, typed, and their validation -- no database.

A targets file has two lists: ``websites`` (each entry a :class:`~crawlherd.sitespec.SiteSpec`: how
to search, paginate, extract, and how politely) and ``targets`` (each a :class:`TargetSpec`: a website
x a list of keywords x a list of locations, each combination one scrape target, with its schedule).
See ``examples/targets.toml`` and ``docs/targets-file.md``.

The whole file is checked and every problem is reported (by line -- in TOML and YAML -- and by key and
field) in one :class:`~crawlherd.errors.TargetsFileError`. Writing a checked
file into the config DB is :func:`crawlherd.dispatch.targets.import_targets`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from crawlherd.dispatch.schedule import make_schedule
from crawlherd.dispatch.targets_reader import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_YAML_NODES,
    Lines,
    read_document,
    too_large,
    where,
)
from crawlherd.duration import parse_duration
from crawlherd.errors import ScheduleError, TargetsFileError
from crawlherd.sitespec import SiteSpec

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_YAML_NODES",
    "TargetSpec",
    "TargetsFile",
    "load_targets_file",
    "parse_targets",
]

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

_ONE_SCHEDULE = "give exactly one of 'every' (an interval such as '6h') or 'cron' ('30 7 * * 1-5')"


def _duration(value: Any) -> float:
    try:
        return parse_duration(value).total_seconds()
    except ScheduleError as exc:
        raise ValueError(str(exc)) from None


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
    active: StrictBool = True

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
    websites: tuple[SiteSpec, ...]
    targets: tuple[TargetSpec, ...]


# -- validation: every problem of the file, collected ---------------------------------------------


class _Problems:
    """The problems found so far, each placed by its key path (and its line: ``lines``)."""

    def __init__(self, lines: Lines) -> None:
        self.lines = lines
        self.found: list[tuple[str, str]] = []

    def add(self, path: Sequence[Any], message: str) -> None:
        self.found.append((where(path, self.lines), message))


def parse_targets(
    text: str,
    *,
    path: str = "<targets>",
    fmt: Literal["toml", "yaml"] | None = None,
    known_websites: Set[str] = frozenset(),
    max_bytes: int = MAX_FILE_BYTES,
    max_depth: int = MAX_DEPTH,
    max_yaml_nodes: int = MAX_YAML_NODES,
    environ: Mapping[str, str] | None = None,
) -> TargetsFile:
    """Validate a targets document; raise :class:`TargetsFileError` listing every problem.

    A target may name a website defined in the file or one of ``known_websites`` (those already in
    the database). A hostile document is refused with a clear problem, in bounded time and memory:
    over ``max_bytes`` characters, nested deeper than ``max_depth``, or (YAML) with aliases that
    expand to more than ``max_yaml_nodes`` values. The YAML is parsed once.

    In every string value, ``${NAME}`` is replaced by the environment variable NAME (``environ``,
    default ``os.environ``) and ``${NAME:-default}`` by NAME or, when it is unset or empty, by
    ``default``: ``base_url = "${DEMO_URL:-http://127.0.0.1:8080}"``. An unset NAME without a default
    is a problem of the file."""
    fmt = fmt or ("yaml" if path.lower().endswith((".yaml", ".yml")) else "toml")
    data, lines = read_document(
        text, path=path, fmt=fmt, max_bytes=max_bytes, max_depth=max_depth, max_yaml_nodes=max_yaml_nodes
    )
    problems = _Problems(lines)
    data = _expand(data, os.environ if environ is None else environ, (), problems)
    for key in data:
        if key not in ("websites", "targets"):
            problems.add([key], "unknown section; a targets file has 'websites' and 'targets'")
    sites = [site for _, _, site in _entries(data, "websites", SiteSpec, problems) if isinstance(site, SiteSpec)]
    targets = _targets(data, known_websites, problems)
    if not data.get("targets") and not data.get("websites"):
        problems.found.append(("(file)", "nothing to import: no websites and no targets"))
    _check_site_names(sites, problems)
    _check_combinations(data.get("targets", []), problems)
    if problems.found:
        raise TargetsFileError(path, problems.found)
    return TargetsFile(path, tuple(sites), tuple(targets))


_Model = TypeVar("_Model", bound=BaseModel)


def _entries(
    data: Mapping[str, Any], section: str, model: type[_Model], problems: _Problems
) -> Iterator[tuple[int, dict[str, Any], _Model | ValidationError]]:
    """(index, entry, the entry as ``model`` or why it is not one) of each entry of ``section``; an
    entry that is not a mapping, or a section that is not a list, is a problem and yields nothing.
    The problems of an entry that fails ``model`` are added before it is yielded."""
    items = data.get(section, [])
    if not isinstance(items, list):
        problems.add([section], f"must be a list ([[{section}]] in TOML, '- ...' in YAML)")
        return
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            problems.add([section, index], "must be a table/mapping")
            continue
        try:
            result: _Model | ValidationError = model.model_validate(item)
        except ValidationError as exc:
            for err in exc.errors():
                problems.add([section, index, *err["loc"]], _message(err))
            result = exc
        yield index, item, result


def _targets(data: Mapping[str, Any], known_websites: Set[str], problems: _Problems) -> list[TargetSpec]:
    """The valid ``targets`` entries; each entry's problems, including a website named nowhere."""
    sites = data.get("websites", [])
    names = [w.get("name") for w in sites if isinstance(w, dict)] if isinstance(sites, list) else []
    defined = {name for name in names if isinstance(name, str)}  # any other name is its entry's problem
    targets: list[TargetSpec] = []
    for index, item, result in _entries(data, "targets", TargetSpec, problems):
        if isinstance(result, TargetSpec):
            targets.append(result)
        elif ("every" in item) == ("cron" in item) and not any(
            _ONE_SCHEDULE in str(err["msg"]) for err in result.errors()
        ):
            # The whole-entry check did not run because a field failed: report it anyway.
            problems.add(["targets", index], _ONE_SCHEDULE)
        name = item.get("website")
        if isinstance(name, str) and name not in defined and name not in known_websites:
            problems.add(["targets", index, "website"], f"no website named {name!r} in this file or in the database")
    return targets


def _check_site_names(sites: Sequence[SiteSpec], problems: _Problems) -> None:
    seen: set[str] = set()
    for index, site in enumerate(sites):
        if site.name in seen:
            problems.add(["websites", index, "name"], f"website {site.name!r} is defined twice")
        seen.add(site.name)


def _check_combinations(raw_targets: Any, problems: _Problems) -> None:
    """Each website x keyword x location once in the file. Checked on the raw entries, so an entry
    with another problem is still compared."""
    combos: dict[tuple[str, str, str], int] = {}
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
                    problems.add(
                        ["targets", index],
                        f"target {kw!r} x {place or '(no location)'!r} on {combo[0]!r} "
                        f"is already defined by targets[{combos[combo]}]",
                    )
                    break
                combos[combo] = index


def _expand(value: Any, environ: Mapping[str, str], path: tuple[Any, ...], problems: _Problems) -> Any:
    """``value`` with ``${NAME}`` and ``${NAME:-default}`` replaced in its strings (see parse_targets)."""
    if isinstance(value, dict):
        return {k: _expand(v, environ, (*path, k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, environ, (*path, i), problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        found = environ.get(name)
        if found:
            return found
        if default is not None:
            return default
        problems.add(path, f"the environment variable {name} is not set "
                     f"(write ${{{name}:-DEFAULT}} to give it a default)")
        return m.group(0)

    return _VARIABLE.sub(substitute, value)


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling)"
    elif err["type"] == "bool_type":
        msg = f"must be true or false (without quotes), not {err.get('input')!r}"
    return msg


def load_targets_file(
    path: str | Path, *, known_websites: Set[str] = frozenset(), max_bytes: int = MAX_FILE_BYTES
) -> TargetsFile:
    """Read and validate a ``.toml``, ``.yaml`` or ``.yml`` targets file; a file over ``max_bytes``
    is refused before it is read."""
    p = Path(path)
    if p.suffix.lower() not in (".toml", ".yaml", ".yml"):
        raise TargetsFileError(str(p), [("(file)", "use a .toml, .yaml or .yml file")])
    try:
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise TargetsFileError(str(p), [("(file)", too_large(p.stat().st_size, max_bytes))])
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetsFileError(str(p), [("(file)", f"cannot read it: {exc}")]) from None
    return parse_targets(text, path=str(p), known_websites=known_websites, max_bytes=max_bytes)
