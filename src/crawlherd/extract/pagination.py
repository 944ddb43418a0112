"""Pagination, as pure functions: no I/O, the page's HTML and counts are passed in.

``pagination_type`` (from the website's config):

- ``none``: the search URL is the only page.
- ``page_param``: a query parameter (``page`` by default) is set to ``start`` and incremented by
  ``step``; the crawl stops at a page that yields no new items, or after ``max_pages``.
- ``next_link``: the URL of the first element matching ``selector`` (attribute ``href`` unless
  ``selector`` says ``css@attr``), resolved against the page URL; stops when there is none, when it
  points back to the same page, or after ``max_pages``.
- ``scroll`` and ``load_more`` (websites fetched by the browser): the listing loads further items
  into the same page, when scrolled to its bottom or when a "load more" button (``selector``) is
  clicked; the browser does it before the page is read (:mod:`crawlherd.fetch.actions`), so there is
  no next URL. ``item_selector`` counts the items (default: the extraction rules'), ``settle`` is how
  long to wait for more after each step (seconds), ``max_pages`` caps the steps (the first view
  included).

Settings table (all optional except ``selector`` for ``next_link``)::

    [websites.pagination]
    param = "page"      # page_param
    start = 1           # page_param: the first page's value
    step = 1            # page_param
    max_pages = 10      # both: the cap
    selector = "a[rel=next]"   # next_link; load_more: the button
    item_selector = "li.job"   # scroll, load_more
    settle = 2.0               # scroll, load_more: seconds
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote_plus, unquote_plus, urljoin, urlsplit, urlunsplit

from selectolax.lexbor import LexborHTMLParser

from crawlherd.errors import ConfigurationError, InvalidURLError
from crawlherd.extract.selectors import FieldRule, check_selector, parse_html
from crawlherd.url import canonicalize_url

__all__ = [
    "IN_PAGE_TYPES",
    "PAGINATION_TYPES",
    "Pagination",
    "get_query_param",
    "increment_query_param",
    "next_link_url",
    "set_query_param",
]

PAGINATION_TYPES = ("none", "next_link", "page_param", "scroll", "load_more")
#: The types the browser carries out inside one page (no next URL).
IN_PAGE_TYPES = frozenset({"scroll", "load_more"})
_SETTINGS = {
    "none": frozenset({"max_pages"}),
    "page_param": frozenset({"param", "start", "step", "max_pages"}),
    "next_link": frozenset({"selector", "max_pages"}),
    "scroll": frozenset({"item_selector", "settle", "max_pages"}),
    "load_more": frozenset({"selector", "item_selector", "settle", "max_pages"}),
}


def get_query_param(url: str, name: str) -> str | None:
    """The (first) value of query parameter ``name`` in ``url``, or None when absent."""
    for key, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if key == name:
            return value
    return None


def set_query_param(url: str, name: str, value: str | int) -> str:
    """``url`` with ``name=value``: the first occurrence replaced in place (later ones removed), or
    appended. Every other parameter is kept as it was written."""
    parts = urlsplit(url)
    encoded = f"{quote_plus(name)}={quote_plus(str(value))}"
    pairs = [p for p in parts.query.split("&") if p] if parts.query else []
    out: list[str] = []
    placed = False
    for pair in pairs:
        key = pair.partition("=")[0]
        if unquote_plus(key) == name:
            if not placed:
                out.append(encoded)
                placed = True
            continue
        out.append(pair)
    if not placed:
        out.append(encoded)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "&".join(out), parts.fragment))


def increment_query_param(url: str, name: str, *, start: int = 1, step: int = 1) -> str:
    """``url`` with integer parameter ``name`` increased by ``step``; absent means the current page is
    ``start`` (so the result is ``start + step``). A non-integer value raises ConfigurationError."""
    current = get_query_param(url, name)
    if current is None or current == "":
        value = start
    else:
        try:
            value = int(current)
        except ValueError:
            raise ConfigurationError(
                f"page parameter {name!r} in {url!r} is {current!r}, not an integer: check the website's "
                "pagination settings (param)"
            ) from None
    return set_query_param(url, name, value + step)


def next_link_url(html: str | bytes | LexborHTMLParser, page_url: str, selector: str | FieldRule) -> str | None:
    """The absolute URL of the next page from the first element matching ``selector``, or None when
    there is none, it is not http(s), or it leads back to ``page_url``."""
    rule = (
        selector
        if isinstance(selector, FieldRule)
        else FieldRule.parse("next_link", selector, website="?", section="pagination", default_attr="href")
    )
    value = rule.extract(parse_html(html), page_url)
    if isinstance(value, list):
        value = value[0] if value else None
    if not value:
        return None
    target = urljoin(page_url, value)
    try:
        if canonicalize_url(target) == canonicalize_url(page_url):
            return None
    except InvalidURLError:
        return None  # javascript:, mailto:, garbage: not a page to follow
    return target


def _check_in_page(pagination_type: str, settings: Mapping[str, Any], where: str) -> None:
    """The selectors of scroll and load_more: the button a selector (Playwright's syntax is wider than
    CSS, so only non-empty), the items plain CSS (counted with ``document.querySelectorAll``)."""
    if settings.get("item_selector") is not None:
        check_selector(settings["item_selector"], where=f"{where}: item_selector")
    button = settings.get("selector")
    if pagination_type == "load_more" and button is None:
        raise ConfigurationError(f'{where}: load_more needs the selector of its button (e.g. selector = "button.more")')
    if button is not None and (not isinstance(button, str) or not button.strip()):
        raise ConfigurationError(f"{where}: selector must be a non-empty string, got {button!r}")


@dataclass(frozen=True, slots=True)
class Pagination:
    """A website's pagination settings, validated; :meth:`next_url` decides the next page."""

    type: str = "none"
    param: str = "page"
    start: int = 1
    step: int = 1
    max_pages: int = 10
    selector: FieldRule | None = None

    @classmethod
    def from_settings(
        cls, pagination_type: str, settings: Mapping[str, Any] | None = None, *, website: str
    ) -> Pagination:
        """Build from the website's ``pagination_type`` and settings table; errors name the website."""
        where = f"website {website!r}: pagination"
        if pagination_type not in PAGINATION_TYPES:
            raise ConfigurationError(f"{where}: type {pagination_type!r} is not one of {', '.join(PAGINATION_TYPES)}")
        settings = dict(settings or {})
        unknown = set(settings) - _SETTINGS[pagination_type]
        if unknown:
            raise ConfigurationError(
                f"{where}: setting(s) {sorted(unknown)} do not apply to {pagination_type!r} "
                f"(it takes {sorted(_SETTINGS[pagination_type])})"
            )
        ints = {}
        for key, default, low in (("start", 1, 0), ("step", 1, 1), ("max_pages", 10, 1)):
            value = settings.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(f"{where}: {key} must be an integer >= {low}, got {value!r}")
            ints[key] = value
        param = settings.get("param", "page")
        if not isinstance(param, str) or not param:
            raise ConfigurationError(f"{where}: param must be a non-empty string, got {param!r}")
        if pagination_type in IN_PAGE_TYPES:
            _check_in_page(pagination_type, settings, where)
        selector = None
        if pagination_type == "next_link":
            if "selector" not in settings:
                raise ConfigurationError(f'{where}: next_link needs a selector (e.g. selector = "a[rel=next]")')
            selector = FieldRule.parse(
                "selector", settings["selector"], website=website, section="pagination", default_attr="href"
            )
        return cls(pagination_type, param, ints["start"], ints["step"], ints["max_pages"], selector)

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, *, website: str, type: str | None = None) -> Pagination:
        """Build from a targets-file ``pagination`` table (``type`` inside it, or given), ignoring the
        settings that belong to other types (the config DB stores every setting of the table)."""
        table = dict(table or {})
        kind = type or table.pop("type", "none")
        table.pop("type", None)
        known = set().union(*_SETTINGS.values())
        unknown = set(table) - known
        if unknown:
            raise ConfigurationError(f"website {website!r}: pagination: unknown setting(s) {sorted(unknown)}")
        relevant = _SETTINGS.get(kind, frozenset())
        return cls.from_settings(kind, {k: v for k, v in table.items() if k in relevant and v is not None},
                                 website=website)

    def first_url(self, search_url: str) -> str:
        """The first page: for ``page_param`` the parameter is set to ``start`` if the URL lacks it."""
        if self.type == "page_param" and get_query_param(search_url, self.param) in (None, ""):
            return set_query_param(search_url, self.param, self.start)
        return search_url

    def next_url(
        self,
        current_url: str,
        *,
        pages_fetched: int,
        html: str | bytes | LexborHTMLParser | None = None,
        new_items: int | None = None,
    ) -> str | None:
        """The URL to fetch after ``current_url``, or None to stop.

        ``pages_fetched`` counts pages of this search fetched so far (current one included);
        ``new_items`` is how many items of the current page were not already found earlier *in this
        search* (page_param stops at 0) -- count against this job's items, not the persistent item
        store, or a re-run would stop after page 1; ``html`` is the current page (next_link reads it).
        """
        if self.type == "none" or self.type in IN_PAGE_TYPES or pages_fetched >= self.max_pages:
            return None
        if self.type == "page_param":
            if new_items is not None and new_items <= 0:
                return None
            return increment_query_param(current_url, self.param, start=self.start, step=self.step)
        if html is None or self.selector is None:
            return None
        return next_link_url(html, current_url, self.selector)

    def to_settings(self) -> dict[str, Any]:
        """The settings table form (what :meth:`from_settings` reads)."""
        if self.type == "page_param":
            return {"param": self.param, "start": self.start, "step": self.step, "max_pages": self.max_pages}
        if self.type == "next_link" and self.selector is not None:
            return {"selector": self.selector.spec(), "max_pages": self.max_pages}
        return {"max_pages": self.max_pages}
