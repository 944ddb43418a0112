"""The demo site's markup: HTML documents as strings, no server involved (benchmarks render them too)."""

from __future__ import annotations

import functools
import html
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from crawlherd.demo.board import DemoJob

__all__ = ["card", "card_fields", "detail", "document", "home", "js_shell", "listing", "next_link"]

_e = html.escape


def document(title: str, body: str) -> str:
    """A whole HTML document (UTF-8) around ``body``."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title></head><body>{body}</body></html>"
    )


def card_fields(job: DemoJob) -> dict[str, Any]:
    """What a listing card shows: ``id``, ``url`` (the detail page's path), ``title``, ``company``,
    ``location``, ``salary``. The server-rendered cards, ``/api/jobs`` and the site's own truth use it."""
    return {
        "id": job.id,
        "url": job.path,
        "title": job.title,
        "company": job.company,
        "location": job.location_name,
        "salary": job.salary,
    }


def card(job: DemoJob) -> str:
    """One listing card (``render.js`` builds the same markup in the browser)."""
    return (
        f'<article class="job-card" data-id="{job.id}">'
        f'<h2 class="title"><a class="job-link" href="{job.path}">{_e(job.title)}</a></h2>'
        f'<span class="company">{_e(job.company)}</span> '
        f'<span class="location">{_e(job.location_name)}</span> '
        f'<span class="salary">{_e(job.salary)}</span>'
        "</article>"
    )


def listing(keyword: str, location: str, page: int, jobs: Sequence[DemoJob]) -> str:
    """A listing page's body: a heading and the cards, or ``No jobs found.``."""
    head = f"<h1>Jobs: {_e(keyword)} in {_e(location)} (page {page})</h1>"
    if not jobs:
        return head + '<p class="empty">No jobs found.</p>'
    return head + '<div id="results">' + "".join(card(job) for job in jobs) + "</div>"


def next_link(keyword: str, location: str, page: int) -> str:
    """The ``/browse`` pager: a ``rel="next"`` link to ``page``."""
    href = f"/browse/{quote(keyword)}/{quote(location)}?page={page}"
    return f'<nav class="pager"><a rel="next" class="next" href="{_e(href)}">Next page</a></nav>'


def detail(job: DemoJob) -> str:
    """A detail page's body: ``.title``, ``.company``, ``.location``, ``.salary``, ``.description``."""
    return (
        f'<article class="job" data-id="{job.id}">'
        f'<h1 class="title">{_e(job.title)}</h1>'
        f'<p><span class="company">{_e(job.company)}</span> &middot; '
        f'<span class="location">{_e(job.location_name)}</span> &middot; '
        f'<span class="salary">{_e(job.salary)}</span></p>'
        f'<div class="description">{_e(job.description)}</div>'
        f'<p class="tags">{" ".join(_e(k) for k in job.keywords)}</p>'
        "</article>"
    )


def home(searches: Iterable[tuple[str, str]]) -> str:
    """The home page's body: links to every search in its three styles."""
    links = []
    for keyword, location in searches:
        query = urlencode({"q": keyword, "l": location})
        links.append(
            f'<li><a href="/search?{query}">{keyword} in {location}</a> '
            f'(<a href="/browse/{keyword}/{location}">browse</a>, <a href="/js/search?{query}">js</a>)</li>'
        )
    return "<h1>Demo jobs</h1><ul class='searches'>" + "".join(links) + "</ul>"


@functools.cache
def _render_script() -> str:
    return resources.files("crawlherd.demo").joinpath("render.js").read_text(encoding="utf-8")


def js_shell(keyword: str, location: str) -> str:
    """The ``/js/search`` body: an empty ``#results`` that ``render.js`` fills from ``/api/jobs``."""
    return (
        f"<h1>Jobs: {_e(keyword)} in {_e(location)}</h1>"
        '<div id="results" data-state="loading"></div>'
        f"<script>{_render_script()}</script>"
    )
