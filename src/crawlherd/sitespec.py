"""A website's configuration, typed once: :class:`SiteSpec`.

One object from the file that declares it to the code that uses it: a targets file's ``[[websites]]``
entry *is* a :class:`SiteSpec`; the config DB stores it whole (``websites.spec``, its JSON form) and
gives it back as the same :class:`SiteSpec`; the dispatch tick puts it typed into the job message
(``schema_version`` 2); the worker uses it as is for listing and detail pages. It is validated once,
when it is built, with the checks the worker would make (selectors, pagination, search-URL template),
and its defaults are written here only.

Fields (a targets-file entry, TOML)::

    [[websites]]
    name = "example-jobs"
    base_url = "https://jobs.example.com"
    search_url_template = "https://jobs.example.com/search?q={keywords}&l={location}"
    requires_playwright = false       # fetch with the browser (Playwright + system Chromium)
    revisit_age = "1d"                # a detail page is fetched again once per revisit period
    metadata = { country = "de" }     # free-form, stored and carried, never interpreted

    [websites.pagination]             # PaginationSpec: type none | next_link | page_param
                                      #   | scroll | load_more (requires_playwright)
    [websites.extraction]             # crawlherd.extract.rules (empty: a Python handler by name)
    [websites.politeness]             # PolitenessSpec: min_delay, max_concurrency, robots obey|ignore
    [websites.browser]                # BrowserSpec (requires_playwright): wait_for, wait_timeout,
                                      #   failure_screenshots
    [websites.fetch]                  # FetchProfile: headers, cookies, proxies, ban, session, login
                                      # (crawlherd.fetchprofile)
"""

from __future__ import annotations

import re
import string
from datetime import timedelta
from typing import Annotated, Any, Literal
from urllib.parse import quote_plus

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    field_validator,
    model_validator,
)

from crawlherd.duration import duration_seconds
from crawlherd.errors import ConfigurationError
from crawlherd.extract.handlers import Handler, resolve_extractor
from crawlherd.extract.pagination import IN_PAGE_TYPES, Pagination
from crawlherd.extract.rules import ExtractionRules
from crawlherd.fetch.actions import BrowserPagination, PageActions, parse_wait_for
from crawlherd.fetchprofile import FetchProfile

__all__ = [
    "PLACEHOLDERS",
    "BrowserSpec",
    "HttpURL",
    "PaginationSpec",
    "PolitenessSpec",
    "SiteSpec",
    "render_search_url",
    "template_problems",
]

PLACEHOLDERS = frozenset({"keywords", "location"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_NOT_HTTP = "must start with http:// or https://"


def _is_http(url: str) -> bool:
    return url.lower().startswith(("http://", "https://"))


def _require_http(url: str) -> str:
    if not _is_http(url):
        raise ValueError(_NOT_HTTP)
    return url


#: A string field that must be an http:// or https:// URL (a website's base URL, a job's search URL).
HttpURL = Annotated[str, AfterValidator(_require_http)]


def template_problems(template: str) -> list[str]:
    """What is wrong with a search-URL template (empty when it can be used)."""
    problems: list[str] = []
    try:
        fields = [name for _, name, _spec, _conv in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return [f"cannot parse the template: {exc} (write a literal brace as '{{{{' or '}}}}')"]
    for name in fields:
        if name not in PLACEHOLDERS:
            problems.append(f"unknown placeholder {{{name}}}; use {{keywords}} and {{location}}")
    if not _is_http(template):
        problems.append(_NOT_HTTP)
    return problems


def render_search_url(template: str, *, keywords: str, location: str | None) -> str:
    """The template with ``{keywords}`` and ``{location}`` filled in, URL-encoded."""
    return template.format(keywords=_quote_plus(keywords), location=_quote_plus(location or ""))


#: The characters ``quote_plus`` leaves as they are (spaces become ``+``).
_UNQUOTED = string.ascii_letters + string.digits + "_.-~ "


def _quote_plus(value: str) -> str:
    """``quote_plus(value)``; the common case (letters, digits, spaces) without its detour through bytes
    (the dispatcher renders one URL per target)."""
    if not value.strip(_UNQUOTED):
        return value.replace(" ", "+")
    return quote_plus(value)


class PaginationSpec(BaseModel):
    """``type``: none | next_link (needs ``selector``) | page_param (``param``, ``start``, ``step``)
    | scroll (``item_selector``, ``settle``) | load_more (needs ``selector``, the button;
    ``item_selector``, ``settle``); ``max_pages`` for every type. scroll and load_more happen in the
    browser, inside one page (``requires_playwright``). See :mod:`crawlherd.extract.pagination`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["none", "next_link", "page_param", "scroll", "load_more"] = "none"
    selector: str | None = None
    param: str = "page"
    start: int = Field(default=1, ge=0)
    step: int = Field(default=1, ge=1)
    max_pages: int = Field(default=10, ge=1, le=10_000)
    item_selector: str | None = None
    settle: float = Field(default=2.0, gt=0, le=600, description="seconds; a duration string in files")

    _settle = field_validator("settle", mode="before")(classmethod(lambda cls, v: duration_seconds(v)))

    @model_validator(mode="after")
    def _needs(self) -> PaginationSpec:
        if self.type == "next_link" and not self.selector:
            raise ValueError("pagination type next_link needs a 'selector' (the CSS selector of the next link)")
        if self.type == "load_more" and not self.selector:
            raise ValueError("pagination type load_more needs a 'selector' (the CSS selector of its button)")
        if self.type == "scroll" and self.selector:
            raise ValueError("pagination type scroll takes no 'selector'; item_selector says what an item is")
        if self.type not in IN_PAGE_TYPES and self.item_selector is not None:
            raise ValueError(f"item_selector is for pagination types scroll and load_more, not {self.type}")
        return self


class BrowserSpec(BaseModel):
    """What the browser does on a website's pages (``requires_playwright`` websites only):
    ``wait_for`` -- ``"css:<selector>"``, ``"js:<expression>"`` or a bare CSS selector -- before a
    page is read, at most ``wait_timeout`` seconds (default: what is left of the fetch's timeout);
    ``failure_screenshots``: keep a screenshot of every page that failed or was blocked, for the
    operator (in the worker's ``screenshot_dir``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wait_for: str | None = None
    wait_timeout: float | None = Field(default=None, gt=0, le=3600, description="seconds; a duration in files")
    failure_screenshots: StrictBool = False

    _wait_timeout = field_validator("wait_timeout", mode="before")(classmethod(lambda cls, v: duration_seconds(v)))

    @field_validator("wait_for")
    @classmethod
    def _wait_for(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_wait_for(value)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
        return value


class PolitenessSpec(BaseModel):
    """Per-site politeness: ``min_delay`` seconds between requests to a host, ``max_concurrency``
    requests in flight per host, ``robots`` obey|ignore (obey: a page robots.txt disallows is not
    fetched, and its Crawl-delay raises ``min_delay``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_delay: float = Field(default=1.0, ge=0)
    max_concurrency: int = Field(default=2, ge=1, le=1000)
    robots: Literal["obey", "ignore"] = "obey"

    _min_delay = field_validator("min_delay", mode="before")(classmethod(lambda cls, v: duration_seconds(v)))


class SiteSpec(BaseModel):
    """A website: how to search it, paginate, extract, how politely, with which fetcher.

    Frozen; built (from a file, the DB or a message) only through validation, which builds the
    extraction rules and the pagination the worker uses (:attr:`rules`, :attr:`paginator`), so a bad
    selector is refused where the website is declared."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    base_url: HttpURL
    search_url_template: str
    requires_playwright: StrictBool = False  # "no" or 1 is a mistake, not a boolean
    pagination: PaginationSpec = Field(default_factory=PaginationSpec)
    extraction: dict[str, Any] = Field(default_factory=dict)
    politeness: PolitenessSpec = Field(default_factory=PolitenessSpec)
    browser: BrowserSpec = Field(default_factory=BrowserSpec)
    fetch: FetchProfile = Field(default_factory=FetchProfile)
    revisit_age: float = Field(default=86_400.0, ge=1, description="seconds; a duration string in files")
    metadata: dict[str, Any] = Field(default_factory=dict)

    _rules: ExtractionRules | None = PrivateAttr(default=None)
    _paginator: Pagination = PrivateAttr(default_factory=Pagination)

    _revisit = field_validator("revisit_age", mode="before")(classmethod(lambda cls, v: duration_seconds(v)))

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be 1-200 letters, digits, '_', '.' or '-', starting with a letter or digit")
        return value

    @field_validator("search_url_template")
    @classmethod
    def _template(cls, value: str) -> str:
        problems = template_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _browser_only(self) -> SiteSpec:
        if self.requires_playwright:
            return self
        if self.pagination.type in IN_PAGE_TYPES:
            raise ValueError(
                f"pagination type {self.pagination.type} happens in the browser: set requires_playwright = true"
            )
        if self.browser != BrowserSpec():
            raise ValueError("the [browser] options (wait_for, failure_screenshots) need requires_playwright = true")
        return self

    @model_validator(mode="after")
    def _build(self) -> SiteSpec:
        # The very checks the worker needs, so that a bad selector is refused here, not at 3 a.m.
        # (No extraction rules is allowed: a Python handler may be registered under the name.)
        try:
            rules = ExtractionRules.from_mapping(self.name, self.extraction) if self.extraction else None
            paginator = Pagination.from_table(self.pagination.model_dump(), website=self.name)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        self._rules = rules
        self._paginator = paginator
        return self

    @property
    def rules(self) -> ExtractionRules | None:
        """The declarative extraction rules, built and checked (None: the website has none)."""
        return self._rules

    @property
    def paginator(self) -> Pagination:
        """The pagination, built and checked."""
        return self._paginator

    @property
    def detail_rules(self) -> ExtractionRules | None:
        """The rules when they read detail pages (``detail_fields``), else None."""
        return self._rules if self._rules is not None and self._rules.detail_fields else None

    def page_actions(self, *, listing: bool) -> PageActions:
        """What the browser does on this website's pages before reading them: ``wait_for``, and on a
        listing page the scroll or load-more pagination (empty for a website without a browser)."""
        if not self.requires_playwright:
            return PageActions()
        p = self.pagination
        pagination = None
        if listing and p.type in IN_PAGE_TYPES:
            item_selector = p.item_selector or self.extraction.get("item_selector")
            pagination = BrowserPagination(
                type="scroll" if p.type == "scroll" else "load_more",
                selector=p.selector if p.type == "load_more" else None,
                item_selector=item_selector if isinstance(item_selector, str) else None,
                max_pages=p.max_pages,
                settle=p.settle,
            )
        browser = self.browser
        return PageActions(wait_for=browser.wait_for, wait_timeout=browser.wait_timeout, pagination=pagination)

    @property
    def revisit_period(self) -> timedelta:
        """:attr:`revisit_age` as a :class:`timedelta`."""
        return timedelta(seconds=self.revisit_age)

    def extractor(self) -> Handler:
        """What reads this website's listing pages: the Python handler registered under its name, else
        its rules (:func:`crawlherd.extract.handlers.resolve_extractor`); neither: ConfigurationError."""
        return resolve_extractor(self.name, self._rules)

    def search_url(self, *, keywords: str, location: str | None) -> str:
        """The search URL of one target."""
        return render_search_url(self.search_url_template, keywords=keywords, location=location)
