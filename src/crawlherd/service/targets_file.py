"""Targets files (TOML or YAML): their entries, typed, and their validation -- no database.

A targets file has two lists: ``websites`` (each entry a :class:`~crawlherd.sitespec.SiteSpec`: how
to search, paginate, extract, and how politely) and ``targets`` (each a :class:`TargetSpec`: a website
x a list of keywords x a list of locations, each combination one scrape target, with its schedule).
See ``examples/targets.toml`` and ``docs/targets-file.md``.

The whole file is checked and every problem is reported (by line -- in TOML and YAML -- and by key and
field) in one :class:`~crawlherd.errors.TargetsFileError`. Writing a checked
file into the config DB is :func:`crawlherd.service.targets.import_targets`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from crawlherd.duration import parse_duration
from crawlherd.errors import ScheduleError, TargetsFileError
from crawlherd.service.schedule import make_schedule
from crawlherd.sitespec import SiteSpec

__all__ = ["TargetSpec", "TargetsFile", "load_targets_file", "parse_targets"]

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


_TOML_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")


def _toml_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Map each key path of a targets file in TOML to its (1-based) line: ``[[websites]]`` and
    ``[[targets]]`` entries, their sub-tables (``[websites.politeness]``) and ``key =`` lines.
    (tomllib keeps no positions; a targets file uses only these shapes.)"""
    lines: dict[tuple[Any, ...], int] = {}
    counts: dict[str, int] = {}
    table: tuple[Any, ...] = ()
    in_multiline = 0  # open brackets of a value spanning lines
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
        if in_multiline:
            in_multiline += line.count("[") - line.count("]")
            continue
        header = _TOML_HEADER.match(line)
        if header and not _TOML_KEY.match(line):
            parts = header.group(2).split(".")
            if header.group(1) == "[[" and len(parts) == 1:
                index = counts.get(parts[0], -1) + 1
                counts[parts[0]] = index
                table = (parts[0], index)
            elif parts[0] in counts:
                table = (parts[0], counts[parts[0]], *parts[1:])
            else:
                table = tuple(parts)
            lines.setdefault(table, number)
            continue
        key = _TOML_KEY.match(line)
        if key:
            lines.setdefault((*table, key.group(1).strip('"')), number)
            value = line[key.end() :]
            in_multiline = max(0, value.count("[") - value.count("]"))
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
            lines = _toml_lines(text)
        else:
            data = yaml.safe_load(text)
            lines = _yaml_lines(text)
    except tomllib.TOMLDecodeError as exc:
        raise TargetsFileError(path, [_toml_error(exc)]) from None
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
    sites: list[SiteSpec] = []
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
                    sites.append(SiteSpec.model_validate(item))
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


def _toml_error(exc: tomllib.TOMLDecodeError) -> tuple[str, str]:
    """tomllib's "Expected ... (at line 3, column 7)" as ("line 3", "not valid TOML: Expected ...")."""
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(exc))
    if found is None:
        return "(file)", f"not valid TOML: {exc}"
    return f"line {found.group(1)}", f"not valid TOML: {str(exc)[: found.start()]} (column {found.group(2)})"


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling)"
    elif err["type"] == "bool_type":
        msg = f"must be true or false (without quotes), not {err.get('input')!r}"
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
