"""What a crawl hands back: exactly one :class:`CrawlResult` per URL, success or not."""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from crawlherd.content_type import HasBody
from crawlherd.errors import PageTooComplexError
from crawlherd.page import clean_html, extract_links, main_content_markdown
from crawlherd.request import Request

__all__ = ["CrawlResult", "DispatchInfo", "encode_png"]

_log = logging.getLogger("crawlherd.crawler.crawler")  # the crawl's: a page whose links it cannot read

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", ""})


def encode_png(png: bytes | None) -> str | None:
    """A screenshot's PNG bytes as :attr:`CrawlResult.screenshot` holds them (base64, as crawl4ai's)."""
    return base64.b64encode(png).decode("ascii") if png else None


@dataclass(slots=True)
class DispatchInfo:
    """How the dispatcher ran one URL: its task id, wall-clock start and end (the crawler's clock),
    process memory (bytes, RSS) when it started, ended and the peak seen meanwhile, and how many
    times it was re-fetched (rate limiting) or re-queued (memory pressure)."""

    task_id: int
    start_time: float
    end_time: float = 0.0
    memory_at_start: int = 0
    memory_at_end: int = 0
    peak_memory: int = 0
    retries: int = 0
    requeues: int = 0

    @property
    def duration(self) -> float:
        return max(0.0, self.end_time - self.start_time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "memory_at_start": self.memory_at_start,
            "memory_at_end": self.memory_at_end,
            "peak_memory": self.peak_memory,
            "retries": self.retries,
            "requeues": self.requeues,
        }


@dataclass(slots=True)
class CrawlResult(HasBody):
    """The outcome of one URL.

    ``success`` is True for a fetched page with a status below 400. ``status_code`` is None when no
    response arrived (timeout, refused address, reset ...); ``error_message`` then says why, and
    ``error_type`` names the crawlherd error class. ``url`` is the URL as asked for, ``final_url`` the
    one after redirects. ``elapsed`` is the fetch time in seconds; ``dispatch`` the dispatcher's
    record (timing, memory, retries). ``text`` and ``content_type`` come from
    :class:`~crawlherd.content_type.HasBody`.

    What crawl4ai users read most is computed on first access, never during the crawl, and kept:
    ``cookies``: what the site set, for a request fetched under a session.

    ``links`` (absolute http(s) links of the page; ``internal_links``/``external_links`` split them by
    host), ``cleaned_html`` (no scripts, styles, comments, handlers) and ``markdown`` (the main
    content as Markdown; extra ``crawlherd[markdown]``). A page that is not HTML gives empty values.

    ``screenshot``: as crawl4ai's, the page as the browser rendered it, a PNG encoded in base64 (a
    ``str``; :attr:`screenshot_png` decodes it), when the run asked for one
    (``CrawlerRunConfig(screenshot=True)``) -- of a failed page too, when the browser had rendered it.
    """

    url: str
    success: bool
    status_code: int | None = None
    error_message: str | None = None
    error_type: str | None = None
    final_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    encoding: str = "utf-8"
    elapsed: float = 0.0
    redirects: tuple[str, ...] = ()
    depth: int = 0
    links_found: list[str] | None = field(default=None, repr=False)
    screenshot: str | None = None
    request: Request | None = None
    dispatch: DispatchInfo | None = None
    #: The cookies the site set while answering a request fetched under a session (every redirect hop
    #: included): ``{"name", "value", "domain", "path"}`` dicts (see :mod:`crawlherd.fetch.session`).
    cookies: list[dict[str, str]] = field(default_factory=list)
    _cleaned_html: str | None = field(default=None, init=False, repr=False, compare=False)
    _markdown: str | None = field(default=None, init=False, repr=False, compare=False)
    #: A crawl's page whose links it follows none of (:func:`crawlherd.crawler.follow.follow_links`): they
    #: are extracted when first read -- ``to_dict`` counts them as for a page whose links were followed.
    _links_due: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def fetched(
        cls,
        request: Request,
        final_url: str,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        encoding: str,
        elapsed: float,
        redirects: tuple[str, ...],
        screenshot: bytes | None = None,
    ) -> CrawlResult:
        """The result of ``request`` answered with ``status`` (a success below 400): what a fetcher
        returned, at ``final_url`` after ``redirects``."""
        ok = status < 400
        # positional, in field order: one is built per page
        return cls(
            request.url, ok, status, None if ok else f"HTTP {status}", None, final_url, headers, body, encoding,
            elapsed, redirects, request.depth, None, encode_png(screenshot), request,
        )

    @property
    def screenshot_png(self) -> bytes | None:
        """:attr:`screenshot` decoded: the PNG's bytes (None without a screenshot)."""
        return base64.b64decode(self.screenshot) if self.screenshot else None

    def _is_html(self) -> bool:
        return bool(self.body) and self.content_type in _HTML_TYPES

    @property
    def html(self) -> str:
        """The page as fetched, decoded (crawl4ai's name for :attr:`text`)."""
        return self.text

    @property
    def base_url(self) -> str:
        """The URL links are resolved against: the final URL after redirects, else the URL asked for."""
        return self.final_url or self.url

    @property
    def links(self) -> list[str]:
        """Absolute http(s) links of the page, document order, no repeats (computed once)."""
        found = self.links_found
        if found is None:
            if self._links_due:
                return self._due_links()
            found = self.links_found = extract_links(self.text, self.base_url) if self._is_html() else []
        return found

    @links.setter
    def links(self, value: list[str]) -> None:
        self.links_found = value

    def defer_links(self) -> None:
        """Leave the links to :attr:`links` (a crawl following none of them): read as a crawl reads them --
        a page over the parse budget (:class:`~crawlherd.errors.PageTooComplexError`) has none, and says so."""
        self._links_due = True

    def _due_links(self) -> list[str]:
        self._links_due = False
        try:
            found = extract_links(self.text, self.base_url) if self._is_html() else []
        except PageTooComplexError as exc:
            _log.warning("%s: links not read: %s", self.url, exc)
            found = []
        self.links_found = found
        return found

    @property
    def internal_links(self) -> list[str]:
        """The links to the page's own host (crawl4ai's ``links["internal"]``, as URLs)."""
        host = urlsplit(self.base_url).hostname
        return [u for u in self.links if urlsplit(u).hostname == host]

    @property
    def external_links(self) -> list[str]:
        """The links to other hosts (crawl4ai's ``links["external"]``, as URLs)."""
        host = urlsplit(self.base_url).hostname
        return [u for u in self.links if urlsplit(u).hostname != host]

    @property
    def cleaned_html(self) -> str:
        """The page's body without scripts, styles, comments, hidden inputs and inline handlers
        (computed once; "" for a page that is not HTML)."""
        if self._cleaned_html is None:
            self._cleaned_html = clean_html(self.text) if self._is_html() else ""
        return self._cleaned_html

    @property
    def markdown(self) -> str:
        """The page's main content as Markdown, links made absolute (computed once; "" for a page
        that is not HTML). Needs the ``markdown`` extra: ``pip install 'crawlherd[markdown]'``."""
        if self._markdown is None:
            self._markdown = main_content_markdown(self.text, self.base_url) if self._is_html() else ""
        return self._markdown

    def to_dict(self, *, body: bool = False) -> dict[str, Any]:
        """A JSON-safe dict (the body only when asked for, as text)."""
        out: dict[str, Any] = {
            "url": self.url,
            "success": self.success,
            "status_code": self.status_code,
            "final_url": self.final_url,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "content_type": self.content_type or None,
            "size": len(self.body),
            "elapsed": round(self.elapsed, 6),
            "depth": self.depth,
            "redirects": list(self.redirects),
        }
        links = self.links if self._links_due else self.links_found
        if links:
            out["links"] = len(links)
        if self.dispatch is not None:
            out["dispatch"] = self.dispatch.to_dict()
        if body:
            out["text"] = self.text
        return out

    def __repr__(self) -> str:
        state = self.status_code if self.success else f"failed: {self.error_message}"
        return f"<CrawlResult {self.url} {state}>"
