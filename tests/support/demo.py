"""Test oracles over the demo's targets document (:mod:`crawlherd.demo.targets`) that ``crawlherd demo``
itself does not need."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crawlherd.demo.targets import demo_targets, iter_searches
from crawlherd.extract.pagination import Pagination
from crawlherd.sitespec import render_search_url

__all__ = ["failing_targets", "first_search_urls"]


def failing_targets(base_url: str) -> dict[str, Any]:
    """A website whose search always answers 500 (for the dead-letter path), one target: the demo's
    ``demo-jobs`` website pointed at ``/fail/search``, without pagination."""
    base = base_url.rstrip("/")
    website = demo_targets(base)["websites"][0] | {
        "name": "demo-broken",
        "search_url_template": f"{base}/fail/search?q={{keywords}}&l={{location}}",
        "pagination": {"type": "none", "max_pages": 1},
    }
    return {
        "websites": [website],
        "targets": [{"website": "demo-broken", "keywords": ["python"], "locations": ["berlin"], "every": "1h"}],
    }


def first_search_urls(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(website, first page URL) for every search of the document: what a worker fetches first."""
    websites = {w["name"]: w for w in document["websites"]}
    urls = []
    for website, keyword, location in iter_searches(document):
        spec = websites[website]
        pagination = Pagination.from_table(spec.get("pagination"), website=website)
        url = render_search_url(spec["search_url_template"], keywords=keyword, location=location)
        urls.append((website, pagination.first_url(url)))
    return urls
