"""What a browser does on a page before its HTML is taken: :class:`PageActions`.

``wait_for`` -- crawl4ai's format: ``"css:<selector>"`` (the element is attached), ``"js:<expression>"``
(a JavaScript expression or function that becomes truthy), or a bare CSS selector -- bounded by
``wait_timeout`` seconds (None: what is left of the fetch's ``total_timeout``); it never coming true
is a :class:`~crawlherd.errors.FetchTimeoutError` naming it.

``pagination`` (:class:`BrowserPagination`) loads a listing's further items inside the one page:

- ``scroll``: scroll to the bottom, wait up to ``settle`` seconds for more items; stop when a scroll
  brought none, or after ``max_pages`` pages (the first view and ``max_pages - 1`` scrolls);
- ``load_more``: click the first element matching ``selector`` (the "load more" button), wait up to
  ``settle`` seconds for more items or for the button to go; stop when it is gone, hidden or
  disabled, when a click brought nothing, or after ``max_pages`` pages (``max_pages - 1`` clicks).

"More items" is the number of elements matching ``item_selector`` (a website's extraction rules give
theirs), else the number of elements in the document. Pagination keeps what it loaded when the fetch's
time runs short: it stops before a step it could not wait for, and the page is taken as it is.

The actions travel in ``Request.meta["crawlherd.page"]`` (JSON-safe, :meth:`PageActions.to_meta`), so
a persistent frontier keeps them; :meth:`PageActions.of` reads them back. Only a fetcher that renders
pages (``takes_screenshots``, the browser's) can honour them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from crawlherd._options import Count, Seconds, check_options
from crawlherd.errors import ConfigurationError, FetchTimeoutError
from crawlherd.request import Request

__all__ = ["PAGE_META", "BrowserPagination", "PageActions", "parse_wait_for", "run_actions"]

log = logging.getLogger(__name__)

#: The ``Request.meta`` key of a request's page actions (:meth:`PageActions.to_meta`).
PAGE_META = "crawlherd.page"
#: Seconds kept back from the fetch's deadline for reading the page once pagination stops.
_RESERVE = 2.0

_COUNT_JS = "(sel) => sel ? document.querySelectorAll(sel).length : document.getElementsByTagName('*').length"
_GREW_JS = (
    "([sel, before, button]) => (sel ? document.querySelectorAll(sel).length"
    " : document.getElementsByTagName('*').length) > before || (button !== null && !document.querySelector(button))"
)
_SCROLL_JS = "() => window.scrollTo(0, document.scrollingElement.scrollHeight)"


def parse_wait_for(value: str) -> tuple[Literal["css", "js"], str]:
    """``"css:<selector>"``, ``"js:<expression>"`` or a bare selector -> (kind, text); an empty
    condition is a ConfigurationError."""
    if not isinstance(value, str):
        raise ConfigurationError(f"wait_for must be a string ('css:<selector>' or 'js:<expression>'), got {value!r}")
    kind: Literal["css", "js"] = "css"
    text = value.strip()
    for prefix in ("css:", "js:"):
        if text.lower().startswith(prefix):
            kind = "js" if prefix == "js:" else "css"
            text = text[len(prefix) :].strip()
            break
    if not text:
        raise ConfigurationError(
            f"wait_for={value!r} is empty: give 'css:<selector>', 'js:<expression>' or a CSS selector"
        )
    return kind, text


@dataclass(frozen=True, kw_only=True)
class BrowserPagination:
    """``type`` scroll | load_more; ``selector`` the "load more" button (load_more only, required);
    ``item_selector`` what counts as an item (None: any element); ``max_pages`` pages at most (the
    first view included); ``settle`` seconds to wait for more items after each step."""

    type: Literal["scroll", "load_more"]
    selector: str | None = None
    item_selector: str | None = None
    max_pages: Count = 10
    settle: Seconds = 2.0

    def __post_init__(self) -> None:
        check_options(self, "browser pagination")
        if self.type == "load_more" and not (self.selector or "").strip():
            raise ConfigurationError(
                "pagination type load_more needs a 'selector' (the CSS selector of the 'load more' button)"
            )
        if self.type == "scroll" and self.selector is not None:
            raise ConfigurationError("pagination type scroll takes no 'selector' (item_selector counts the items)")


@dataclass(frozen=True, kw_only=True)
class PageActions:
    """What to do on a rendered page before its HTML is taken (see the module): ``wait_for`` a
    condition (at most ``wait_timeout`` seconds), then ``pagination``."""

    wait_for: str | None = None
    wait_timeout: Seconds | None = None
    pagination: BrowserPagination | None = None

    def __post_init__(self) -> None:
        check_options(self, "page actions")
        if self.wait_for is not None:
            parse_wait_for(self.wait_for)

    def __bool__(self) -> bool:
        return self.wait_for is not None or self.pagination is not None

    def to_meta(self) -> dict[str, Any]:
        """The JSON-safe form carried in ``Request.meta[PAGE_META]``."""
        meta: dict[str, Any] = {}
        if self.wait_for is not None:
            meta["wait_for"] = self.wait_for
        if self.wait_timeout is not None:
            meta["wait_timeout"] = self.wait_timeout
        p = self.pagination
        if p is not None:
            meta["pagination"] = {"type": p.type, "selector": p.selector, "item_selector": p.item_selector,
                                  "max_pages": p.max_pages, "settle": p.settle}
        return meta

    @classmethod
    def from_meta(cls, raw: Any) -> PageActions:
        """Read :meth:`to_meta`'s form back (ConfigurationError when it is not one)."""
        if not isinstance(raw, dict):
            raise ConfigurationError(f"meta[{PAGE_META!r}] must be a mapping, got {type(raw).__name__}")
        pagination = raw.get("pagination")
        try:
            return cls(
                wait_for=raw.get("wait_for"),
                wait_timeout=raw.get("wait_timeout"),
                pagination=BrowserPagination(**pagination) if pagination is not None else None,
            )
        except TypeError as exc:
            raise ConfigurationError(f"meta[{PAGE_META!r}]: {exc}") from None

    @classmethod
    def of(cls, request: Request) -> PageActions:
        """The actions ``request`` asks for (empty when none); the older ``meta["wait_for"]`` (a
        selector) still counts when there is no ``wait_for`` in them."""
        meta = request.meta
        actions = cls.from_meta(meta[PAGE_META]) if meta and PAGE_META in meta else cls()
        legacy = meta.get("wait_for") if meta else None
        if actions.wait_for is None and legacy:
            actions = cls(wait_for=str(legacy), wait_timeout=actions.wait_timeout, pagination=actions.pagination)
        return actions


async def run_actions(page: Any, actions: PageActions, *, deadline: float, url: str, request: Request,
                      timeout_error: type[BaseException]) -> int:
    """Run ``actions`` on ``page`` (a Playwright page) before ``deadline`` (``time.monotonic()``);
    ``timeout_error`` is Playwright's TimeoutError. Returns the pages the listing was read in (1
    without pagination)."""
    if actions.wait_for is not None:
        await _wait_for(page, actions, deadline=deadline, url=url, request=request, timeout_error=timeout_error)
    if actions.pagination is None:
        return 1
    return await _paginate(page, actions.pagination, deadline=deadline, url=url, timeout_error=timeout_error)


def _left_ms(deadline: float, cap: float | None = None, reserve: float = 0.25) -> float:
    left = deadline - time.monotonic() - reserve
    if cap is not None:
        left = min(left, cap)
    return max(1.0, left * 1000)


async def _wait_for(page: Any, actions: PageActions, *, deadline: float, url: str, request: Request,
                    timeout_error: type[BaseException]) -> None:
    assert actions.wait_for is not None
    kind, text = parse_wait_for(actions.wait_for)
    timeout = _left_ms(deadline, actions.wait_timeout)
    try:
        if kind == "css":
            await page.wait_for_selector(text, state="attached", timeout=timeout)
        else:
            await page.wait_for_function(text, timeout=timeout, polling=100)
    except timeout_error:
        what = f"selector {text!r}" if kind == "css" else f"condition js:{text}"
        raise FetchTimeoutError(f"{url}: {what} did not appear in time ({timeout / 1000:.1f}s)", url=url,
                                request=request) from None


async def _paginate(page: Any, p: BrowserPagination, *, deadline: float, url: str,
                    timeout_error: type[BaseException]) -> int:
    pages = 1
    while pages < p.max_pages:
        if deadline - time.monotonic() < p.settle + _RESERVE:
            log.warning("%s: %s pagination stopped after %d pages: the fetch's total_timeout is running out "
                        "(raise it to read more)", url, p.type, pages)
            break
        before = await page.evaluate(_COUNT_JS, p.item_selector)
        if p.type == "scroll":
            await page.evaluate(_SCROLL_JS)
        else:
            assert p.selector is not None
            button = page.locator(p.selector).first
            if not await button.count() or not await button.is_visible() or not await button.is_enabled():
                break
            await button.click(timeout=_left_ms(deadline, reserve=_RESERVE))
        try:
            await page.wait_for_function(
                _GREW_JS, arg=[p.item_selector, before, p.selector if p.type == "load_more" else None],
                timeout=p.settle * 1000, polling=100,
            )
        except timeout_error:
            break  # the step brought nothing new: the end of the listing
        pages += 1
    return pages
