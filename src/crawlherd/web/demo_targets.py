"""The demo's websites and targets, in the targets-file format, and what crawling them must find.

:func:`demo_targets` returns the document as a dict; :func:`demo_targets_toml` renders it as a TOML
targets file (``crawlherd targets import`` reads either form). The format (see ``docs/demo-site.md``)::

    [[websites]]
    name = "demo-jobs"                                   # unique; also the Python handler's name
    base_url = "http://127.0.0.1:8080"
    search_url_template = "http://127.0.0.1:8080/search?q={keywords}&l={location}&page={page}"
    requires_playwright = false

    [websites.pagination]                                # see crawlherd.extract.pagination
    type = "page_param"                                  # none | next_link | page_param
    param = "page"
    start = 1
    max_pages = 10

    [websites.extraction]                                # see crawlherd.extract.rules
    item_selector = "article.job-card"
    item_url = "a.job-link@href"
    required = ["title"]

    [websites.extraction.fields]
    title = "h2.title"
    company = ".company"

    [websites.politeness]
    min_delay = 0.0                                      # seconds between requests to the host
    max_concurrency = 4                                  # requests in flight to the host
    robots = "obey"                                      # obey | ignore

    [[targets]]                                          # one target per keyword x location
    website = "demo-jobs"
    keywords = ["python", "rust"]
    locations = ["berlin", "remote"]
    every = "1h"
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from crawlherd.extract.pagination import Pagination
from crawlherd.extract.rules import ExtractionRules, item_fingerprint
from crawlherd.sitespec import render_search_url

__all__ = [
    "DEMO_WEBSITES",
    "demo_targets",
    "demo_targets_toml",
    "expected_results",
    "failing_targets",
    "first_search_urls",
    "iter_searches",
    "render_toml",
]

DEMO_WEBSITES = ("demo-jobs", "demo-jobs-browse", "demo-jobs-js")

_CARD_FIELDS = {
    "title": "h2.title",
    "company": ".company",
    "location": ".location",
    "salary": ".salary",
}
_CARD_RULES: dict[str, Any] = {
    "item_selector": "article.job-card",
    "item_url": "a.job-link@href",
    "required": ["title"],
    "fields": dict(_CARD_FIELDS),
}
_POLITENESS = {"min_delay": 0.0, "max_concurrency": 4, "robots": "obey"}


def demo_targets(base_url: str, *, every: str = "1h") -> dict[str, Any]:
    """The demo's targets document for a demo site at ``base_url`` (no trailing slash needed).

    Three websites over the same job board: ``demo-jobs`` (``/search``, page_param pagination, every
    keyword x location), ``demo-jobs-browse`` (``/browse``, next_link pagination, detail pages) and
    ``demo-jobs-js`` (``/js/search``, rendered by JavaScript: ``requires_playwright``).
    """
    base = base_url.rstrip("/")
    return {
        "websites": [
            {
                "name": "demo-jobs",
                "base_url": base,
                "search_url_template": f"{base}/search?q={{keywords}}&l={{location}}",
                "requires_playwright": False,
                "pagination": {"type": "page_param", "param": "page", "start": 1, "max_pages": 10},
                "extraction": dict(_CARD_RULES),
                "politeness": dict(_POLITENESS),
            },
            {
                "name": "demo-jobs-browse",
                "base_url": base,
                "search_url_template": f"{base}/browse/{{keywords}}/{{location}}",
                "requires_playwright": False,
                "pagination": {"type": "next_link", "selector": "a[rel=next]", "max_pages": 10},
                "extraction": {**_CARD_RULES, "detail_fields": {"description": ".description"}},
                "politeness": dict(_POLITENESS),
            },
            {
                "name": "demo-jobs-js",
                "base_url": base,
                "search_url_template": f"{base}/js/search?q={{keywords}}&l={{location}}",
                "requires_playwright": True,
                "pagination": {"type": "none", "max_pages": 1},
                "extraction": dict(_CARD_RULES),
                "politeness": {"min_delay": 0.0, "max_concurrency": 2, "robots": "obey"},
            },
        ],
        "targets": [
            {
                "website": "demo-jobs",
                "keywords": ["python", "rust", "devops", "frontend", "data"],
                "locations": ["berlin", "london", "paris", "remote"],
                "every": every,
            },
            {
                "website": "demo-jobs-browse",
                "keywords": ["python", "rust"],
                "locations": ["berlin", "remote"],
                "every": every,
            },
            {
                "website": "demo-jobs-js",
                "keywords": ["data", "frontend"],
                "locations": ["london", "paris"],
                "every": every,
            },
        ],
    }


def failing_targets(base_url: str) -> dict[str, Any]:
    """A website whose search always answers 500 (for the dead-letter path), one target."""
    base = base_url.rstrip("/")
    return {
        "websites": [
            {
                "name": "demo-broken",
                "base_url": base,
                "search_url_template": f"{base}/fail/search?q={{keywords}}&l={{location}}",
                "requires_playwright": False,
                "pagination": {"type": "none", "max_pages": 1},
                "extraction": dict(_CARD_RULES),
                "politeness": dict(_POLITENESS),
            }
        ],
        "targets": [{"website": "demo-broken", "keywords": ["python"], "locations": ["berlin"], "every": "1h"}],
    }


def iter_searches(document: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Every (website, keyword, location) the document's targets expand to, in file order."""
    out: list[tuple[str, str, str]] = []
    for target in document.get("targets", []):
        for keyword in target["keywords"]:
            for location in target["locations"]:
                out.append((target["website"], keyword, location))
    return out


def expected_results(site: Any, document: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """What crawling ``document`` against the demo ``site`` must store: website name -> item
    fingerprint (hex) -> ``{"url", "fields"}``, with the fields the website's rules read (plus
    ``description`` when the website fetches detail pages). An item found by two searches of one
    website is one entry."""
    websites = {w["name"]: w for w in document["websites"]}
    out: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in websites}
    for website, keyword, location in iter_searches(document):
        spec = websites[website]
        rules = ExtractionRules.from_mapping(website, spec["extraction"])
        names = [f.name for f in rules.fields]
        for expected in site.expected_items(keyword, location):
            fields = {name: expected[name] for name in names}
            if rules.detail_fields:
                detail = site.expected_detail(expected["id"])
                fields.update({f.name: detail[f.name] for f in rules.detail_fields})
            key = item_fingerprint(website, expected["url"]).hex()
            out[website][key] = {"url": expected["url"], "fields": fields}
    return out


def first_search_urls(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(website, first page URL) for every search of the document (helper for tests and the demo)."""
    websites = {w["name"]: w for w in document["websites"]}
    urls = []
    for website, keyword, location in iter_searches(document):
        spec = websites[website]
        pagination = Pagination.from_table(spec.get("pagination"), website=website)
        url = render_search_url(spec["search_url_template"], keywords=keyword, location=location)
        urls.append((website, pagination.first_url(url)))  # what a worker fetches first
    return urls


# -- a small TOML writer for this document's shapes (tomllib only reads) ---------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML: {value!r}")


def _table(lines: list[str], path: list[str], table: Mapping[str, Any], *, array: bool) -> None:
    if path:
        header = ".".join(_key(p) for p in path)
        lines.append("")
        lines.append(f"[[{header}]]" if array else f"[{header}]")
    subtables: list[tuple[str, Any, bool]] = []
    for key, value in table.items():
        if isinstance(value, Mapping) and value and all(not isinstance(v, Mapping) or v for v in value.values()):
            subtables.append((key, value, False))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            subtables.append((key, value, True))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value, is_array in subtables:
        if is_array:
            for element in value:
                _table(lines, [*path, key], element, array=True)
        else:
            _table(lines, [*path, key], value, array=False)


def render_toml(document: Mapping[str, Any]) -> str:
    """``document`` (tables, arrays of tables, scalars, lists) as TOML text."""
    lines: list[str] = []
    _table(lines, [], document, array=False)
    return "\n".join(lines).lstrip("\n") + "\n"


def demo_targets_toml(base_url: str, *, every: str = "1h") -> str:
    """:func:`demo_targets` as a TOML targets file."""
    header = "# crawlherd demo targets (generated by crawlherd.web.demo_targets)\n"
    return header + render_toml(demo_targets(base_url, every=every))
