"""Declarative extraction: CSS selectors (selectolax / lexbor) turn a listing page into items.

A website's rules, as stored in the targets file and the config DB::

    item_selector = "article.job-card"          # one match per item (the item's container)
    item_url = "a.job-link@href"                # resolved against the page URL
    next_link = "a[rel=next]"                   # optional; attribute defaults to href
    required = ["title"]                        # optional: items missing one of these are dropped

    [fields]                                    # name -> spec, inside the item container
    title = "h2.title"                          # text (whitespace collapsed)
    job_id = "@data-id"                         # an attribute of the container itself
    logo = "img.logo@src"                       # an attribute of the first match
    tags = { selector = ".tag", all = true }    # every match, as a list
    apply = { selector = "a.apply", attr = "href", absolute = true }   # resolved against the page URL

    [detail_fields]                             # optional: fields read from the item's detail page
    description = ".description"

A field spec is ``"selector"`` (text), ``"selector@attr"``, ``"@attr"`` or a table with ``selector``,
``attr``, ``all``, ``required``, ``absolute``. Every selector is checked when the rules are built: a
bad one raises :class:`~crawlherd.errors.ConfigurationError` naming the website and the field.

Each :class:`Item` carries its ``url`` and a stable ``fingerprint``: 8 bytes from the website name and
the canonical item URL (:func:`item_fingerprint`), so the same posting found by two searches, or on
two runs, is one item.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser, LexborNode

from crawlherd.errors import ConfigurationError, InvalidURLError
from crawlherd.extract.pagination import next_link_url
from crawlherd.extract.selectors import FieldRule, check_selector, parse_html
from crawlherd.item import Item, item_fingerprint, make_item

__all__ = [
    "ExtractionResult",
    "ExtractionRules",
    "Page",
]

_RULE_KEYS = frozenset({"item_selector", "item_url", "next_link", "fields", "required", "detail_fields"})


@dataclass(frozen=True, slots=True)
class Page:
    """A fetched page handed to an extractor (rules or a Python handler)."""

    url: str
    html: str
    website: str
    status: int = 200
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExtractionResult:
    """Items found on one page, the next page's URL when the rules know it, and why items were dropped."""

    items: list[Item]
    next_url: str | None = None
    dropped: list[str] = field(default_factory=list)


def _parse_fields(website: str, section: str, raw: Any) -> tuple[FieldRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"website {website!r}: {section} must be a table of name = selector, got {raw!r}")
    rules = []
    for name, spec in raw.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"website {website!r}: {section}: field names must be non-empty strings")
        rules.append(FieldRule.parse(name, spec, website=website, section=section))
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class ExtractionRules:
    """A website's declarative extraction rules; build with :meth:`from_mapping` (validated).

    Callable as a handler: ``rules(page) -> ExtractionResult``.
    """

    website: str
    item_selector: str
    fields: tuple[FieldRule, ...] = ()
    item_url: FieldRule | None = None
    next_link: FieldRule | None = None
    detail_fields: tuple[FieldRule, ...] = ()

    @classmethod
    def from_mapping(cls, website: str, rules: Mapping[str, Any]) -> ExtractionRules:
        """Validate and build. Any problem raises ConfigurationError naming the website and the key."""
        if not isinstance(rules, Mapping):
            raise ConfigurationError(f"website {website!r}: extraction rules must be a table, got {rules!r}")
        unknown = set(rules) - _RULE_KEYS
        if unknown:
            raise ConfigurationError(
                f"website {website!r}: unknown extraction key(s) {sorted(unknown)}; known: {sorted(_RULE_KEYS)}"
            )
        if "item_selector" not in rules:
            raise ConfigurationError(f"website {website!r}: extraction rules need an item_selector")
        item_selector = check_selector(rules["item_selector"], where=f"website {website!r}: item_selector")
        fields = _parse_fields(website, "fields", rules.get("fields"))
        required = rules.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ConfigurationError(f"website {website!r}: required must be a list of field names, got {required!r}")
        names = {f.name for f in fields}
        missing = [r for r in required if r not in names]
        if missing:
            raise ConfigurationError(f"website {website!r}: required names unknown field(s) {missing}")
        fields = tuple(
            FieldRule(f.name, f.selector, f.attr, f.all, True, f.absolute) if f.name in required else f for f in fields
        )
        item_url = next_link = None
        if rules.get("item_url") is not None:
            item_url = FieldRule.parse(
                "item_url", rules["item_url"], website=website, section="extraction", default_attr="href"
            )
        if rules.get("next_link") is not None:
            next_link = FieldRule.parse(
                "next_link", rules["next_link"], website=website, section="extraction", default_attr="href"
            )
        detail = _parse_fields(website, "detail_fields", rules.get("detail_fields"))
        return cls(website, item_selector, fields, item_url, next_link, detail)

    def to_mapping(self) -> dict[str, Any]:
        """The mapping form (what :meth:`from_mapping` reads)."""
        out: dict[str, Any] = {"item_selector": self.item_selector, "fields": {f.name: f.spec() for f in self.fields}}
        if self.item_url is not None:
            out["item_url"] = self.item_url.spec()
        if self.next_link is not None:
            out["next_link"] = self.next_link.spec()
        if self.detail_fields:
            out["detail_fields"] = {f.name: f.spec() for f in self.detail_fields}
        return out

    def __call__(self, page: Page) -> ExtractionResult:
        return self.extract(page.html, page.url)

    def extract(self, html: str | bytes | LexborHTMLParser, page_url: str) -> ExtractionResult:
        """Items on a listing page (in page order, duplicates dropped) and the next link if configured."""
        tree = parse_html(html)
        items: list[Item] = []
        dropped: list[str] = []
        seen: set[bytes] = set()
        for index, node in enumerate(tree.css(self.item_selector)):
            values: dict[str, Any] = {f.name: f.extract(node, page_url) for f in self.fields}
            absent = [f.name for f in self.fields if f.required and values[f.name] in (None, "", [])]
            if absent:
                dropped.append(f"item {index}: required field(s) {absent} missing")
                continue
            try:
                item = self._make_item(node, page_url, values)
            except InvalidURLError as exc:
                dropped.append(f"item {index}: {exc}")
                continue
            if item is None:
                dropped.append(f"item {index}: no item URL (selector {self.item_url and self.item_url.spec()!r})")
                continue
            if item.fingerprint in seen:
                dropped.append(f"item {index}: duplicate of an earlier item on this page ({item.url})")
                continue
            seen.add(item.fingerprint)
            items.append(item)
        return ExtractionResult(items=items, next_url=self.find_next(tree, page_url), dropped=dropped)

    def _make_item(self, node: LexborNode, page_url: str, values: dict[str, Any]) -> Item | None:
        if self.item_url is None:
            # No item URL: the item lives on the page; its content tells it apart from its neighbours.
            content = json.dumps(values, sort_keys=True, ensure_ascii=False).encode("utf-8")
            key = item_fingerprint(self.website, page_url, content=content)
            return Item(self.website, page_url, key, values)
        href = self.item_url.extract(node, page_url)
        if not href or not isinstance(href, str):
            return None
        return make_item(self.website, urljoin(page_url, href), values)

    def find_next(self, html: str | bytes | LexborHTMLParser, page_url: str) -> str | None:
        """The next page's absolute URL from the ``next_link`` rule, or None."""
        if self.next_link is None:
            return None
        return next_link_url(html, page_url, self.next_link)

    def extract_detail(self, html: str | bytes | LexborHTMLParser, page_url: str) -> dict[str, Any]:
        """The ``detail_fields`` read from a whole detail page."""
        tree = parse_html(html)
        return {f.name: f.extract(tree, page_url) for f in self.detail_fields}
