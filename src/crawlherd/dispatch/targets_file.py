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
import tomllib
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from crawlherd.dispatch.schedule import make_schedule
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


# -- parsing and validation -----------------------------------------------------------------------


#: The largest targets file read (bytes). A targets file of thousands of targets is well under 1 MiB.
MAX_FILE_BYTES = 8 * 1024 * 1024
#: The deepest nesting of mappings and lists a targets file may have (a real one needs about 6).
MAX_DEPTH = 64
#: How many nodes a YAML document may expand to once its aliases are followed (billion laughs).
MAX_YAML_NODES = 200_000


_FLOW_BRACKETS = re.compile(r"[\[\]{}]")


class _Refused(Exception):
    """A document over one of the limits; ``str()`` is the message for the user."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses documents nested deeper than ``max_depth`` while composing
    (PyYAML's composer recurses once per level: 100,000 levels would end in a RecursionError)."""

    max_depth = MAX_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Refused(f"line {mark.line + 1}: nested deeper than {self.max_depth} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_expansion(root: yaml.Node, max_nodes: int) -> None:
    """Refuse a YAML graph whose aliases expand to more than ``max_nodes`` nodes. Each distinct node
    is counted once (memoised), so this costs the size of the file, not of its expansion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
        if sizes[id(node)] > max_nodes:
            raise _Refused(
                f"line {node.start_mark.line + 1}: its aliases expand to more than {max_nodes:,} values "
                "(a 'billion laughs' document?); write the entries out instead of nesting aliases"
            )


def _load_yaml(text: str, *, max_depth: int, max_nodes: int) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """Parse YAML once: compose the node graph (depth-limited), check how far its aliases expand,
    map each key path to its line, then build the Python data from the same graph."""
    # PyYAML's scanner keeps a pending "simple key" per open flow bracket and scans them all on every
    # token: refuse a deep ``[[[[...`` before it starts (brackets in quoted strings count too -- a
    # real targets file has nowhere near ``max_depth`` of them open at once).
    depth = 0
    for bracket in _FLOW_BRACKETS.findall(text):
        depth += 1 if bracket in "[{" else -1
        if depth > max_depth:
            raise _Refused(f"nested deeper than {max_depth} levels ('[' and '{{' opened {depth} deep)")
    loader = _BoundedLoader(text)
    loader.max_depth = max_depth
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}
        _check_expansion(root, max_nodes)
        lines = _yaml_lines(root)
        return loader.construct_document(root), lines
    finally:
        loader.dispose()


def _yaml_lines(root: yaml.Node) -> dict[tuple[Any, ...], int]:
    """Map each key path of a YAML document to its (1-based) line. A node reached again through an
    alias is not walked again: its paths are those of its anchor."""
    lines: dict[tuple[Any, ...], int] = {}
    walked: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in walked:
            continue
        walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                lines[(*path, name)] = key.start_mark.line + 1
                stack.append((value, (*path, name)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((item, (*path, index)))
    return lines


def _depth(data: Any, limit: int) -> bool:
    """True when ``data`` (parsed TOML) nests at most ``limit`` levels (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return True


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
    if len(text) > max_bytes:
        raise TargetsFileError(path, [("(file)", _too_large(len(text), max_bytes))])
    lines: dict[tuple[Any, ...], int] = {}
    try:
        if fmt == "toml":
            data: Any = tomllib.loads(text)
            if not _depth(data, max_depth):
                raise _Refused(f"nested deeper than {max_depth} levels")
            lines = _toml_lines(text)
        else:
            data, lines = _load_yaml(text, max_depth=max_depth, max_nodes=max_yaml_nodes)
    except _Refused as exc:
        raise TargetsFileError(path, [("(file)", f"refused: {exc}")]) from None
    except RecursionError:
        # tomllib recurses once per nested array or inline table: a deep one runs out of stack.
        raise TargetsFileError(path, [("(file)", f"refused: nested deeper than {max_depth} levels")]) from None
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
    data = _expand(data, os.environ if environ is None else environ, (), lines, problems)
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


def _expand(
    value: Any, environ: Mapping[str, str], path: tuple[Any, ...], lines: Mapping[tuple[Any, ...], int],
    problems: list[tuple[str, str]],
) -> Any:
    """``value`` with ``${NAME}`` and ``${NAME:-default}`` replaced in its strings (see parse_targets)."""
    if isinstance(value, dict):
        return {k: _expand(v, environ, (*path, k), lines, problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, environ, (*path, i), lines, problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        found = environ.get(name)
        if found:
            return found
        if default is not None:
            return default
        problems.append((_where(path, lines), f"the environment variable {name} is not set "
                         f"(write ${{{name}:-DEFAULT}} to give it a default)"))
        return m.group(0)

    return _VARIABLE.sub(substitute, value)


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


def _too_large(size: int, limit: int) -> str:
    return (
        f"the file is {size / 1_048_576:.1f} MiB, over the {limit / 1_048_576:.1f} MiB limit for a targets file; "
        "split it into several files (each import adds to the database)"
    )


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
            raise TargetsFileError(str(p), [("(file)", _too_large(p.stat().st_size, max_bytes))])
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetsFileError(str(p), [("(file)", f"cannot read it: {exc}")]) from None
    return parse_targets(text, path=str(p), known_websites=known_websites, max_bytes=max_bytes)
