"""Crawl one scrape job through the engine: the search URL, its pagination and the items on each
page; then (when the website has detail fields) queue the items' detail pages in the worker's frontier.

Listing pages are fetched in order (the next page depends on this one) through a dispatcher with the
website's ``RateLimiter``: ``min_delay`` spacing per domain, Retry-After and back-off on 429/503 with
re-fetches. The worker keeps one rate limiter per website, so its concurrent jobs share the spacing.

Detail pages go through the frontier (memory, SQLite or Redis, shared by every worker with Redis): its
duplicate filter, keyed by the revisit period, means an item page fetched in this period -- by any run,
by any worker -- is not fetched again; the website's ``min_delay`` and ``max_concurrency`` become the
frontier's per-host policy; a worker that dies loses no detail page (its leases expire).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from crawlherd import metrics
from crawlherd.crawler import Crawler
from crawlherd.dispatch import MemoryAdaptiveDispatcher, RateLimiter, SemaphoreDispatcher
from crawlherd.dispatch.base import Dispatcher
from crawlherd.errors import ConfigurationError, JobError
from crawlherd.extract.handlers import Handler, resolve_extractor, run_extractor
from crawlherd.extract.pagination import Pagination
from crawlherd.extract.rules import ExtractionRules, Item, Page
from crawlherd.frontier.base import Frontier
from crawlherd.messages import JobMessage
from crawlherd.request import Request
from crawlherd.result import CrawlResult

__all__ = [
    "DEFAULT_REVISIT_AGE",
    "DETAIL_META",
    "JobOutcome",
    "RateLimiters",
    "SiteConfig",
    "crawl_job",
    "make_dispatcher",
]

#: The key under which a detail request's ``meta`` carries what storing its item needs.
DETAIL_META = "crawlherd.detail"

log = logging.getLogger(__name__)

DEFAULT_REVISIT_AGE = timedelta(days=1)


@dataclass(frozen=True)
class SiteConfig:
    """What the worker needs to know of a website, read from the job message's ``metadata``."""

    website: str
    extractor: Handler
    pagination: Pagination
    min_delay: float = 1.0
    max_concurrency: int = 2
    obey_robots: bool = True
    detail_rules: ExtractionRules | None = None
    revisit_age: timedelta = DEFAULT_REVISIT_AGE

    @classmethod
    def from_job(cls, job: JobMessage) -> SiteConfig:
        """Validate the site settings carried by ``job``; a problem raises ConfigurationError."""
        meta = job.metadata
        name = job.website_name
        extraction = meta.get("extraction") or {}
        extractor = resolve_extractor(name, extraction)
        detail = extractor if isinstance(extractor, ExtractionRules) and extractor.detail_fields else None
        politeness = meta.get("politeness") or {}
        site = meta.get("site") or {}
        revisit = site.get("revisit_age_seconds", DEFAULT_REVISIT_AGE.total_seconds())
        try:
            return cls(
                website=name,
                extractor=extractor,
                pagination=Pagination.from_table(meta.get("pagination"), website=name, type=job.pagination_type),
                min_delay=float(politeness.get("min_delay", 1.0)),
                max_concurrency=int(politeness.get("max_concurrency", 2)),
                obey_robots=politeness.get("robots", "obey") == "obey",
                detail_rules=detail,
                revisit_age=timedelta(seconds=float(revisit)),
            )
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"website {name!r}: bad politeness or revisit settings: {exc}") from None


@dataclass
class JobOutcome:
    """What one job crawl found."""

    pages: int = 0
    details_queued: int = 0
    items: dict[bytes, Item] = field(default_factory=dict)


class RateLimiters:
    """One :class:`RateLimiter` per website, built from its ``min_delay``."""

    def __init__(self) -> None:
        self._limiters: dict[str, tuple[float, RateLimiter]] = {}

    def for_site(self, site: SiteConfig) -> RateLimiter:
        held = self._limiters.get(site.website)
        if held is None or held[0] != site.min_delay:
            limiter = RateLimiter(
                base_delay=(site.min_delay, site.min_delay * 1.25),
                max_delay=max(60.0, site.min_delay * 1.25),
                decay=0.5,  # a success halves a raised delay: polite, and quick to recover after one 429
            )
            held = self._limiters[site.website] = (site.min_delay, limiter)
        return held[1]


def make_dispatcher(kind: str, concurrency: int, rate_limiter: RateLimiter) -> Dispatcher:
    """``semaphore`` or ``memory-adaptive``, bounded by ``concurrency``."""
    if kind == "semaphore":
        return SemaphoreDispatcher(concurrency, rate_limiter=rate_limiter)
    if kind == "memory-adaptive":
        return MemoryAdaptiveDispatcher(max_session_permit=concurrency, rate_limiter=rate_limiter)
    raise ConfigurationError(f"unknown dispatcher {kind!r}: use 'semaphore' or 'memory-adaptive'")


async def _fetch_one(crawler: Crawler, url: str, dispatcher: Dispatcher) -> CrawlResult:
    results = await crawler.arun_many([url], dispatcher=dispatcher, stream=False)
    for r in results:
        metrics.observe_fetch(r)
    return results[0]


async def crawl_job(
    job: JobMessage,
    *,
    crawler: Crawler,
    frontier: Frontier,
    limiters: RateLimiters,
    now: datetime | None = None,
) -> JobOutcome:
    """Crawl ``job``'s listing pages with ``crawler`` (HTTP or browser, chosen by the caller), return
    the items found, and queue their detail pages in ``frontier`` (when the website has detail fields).

    A listing page that cannot be fetched or read fails the job (:class:`JobError`), so that the worker
    retries it.
    """
    site = SiteConfig.from_job(job)
    limiter = limiters.for_site(site)
    outcome = JobOutcome()
    url: str | None = site.pagination.first_url(job.search_url)
    while url is not None:
        result = await _fetch_one(crawler, url, SemaphoreDispatcher(1, rate_limiter=limiter))
        if not result.success:
            raise JobError(f"listing page {url} failed: {result.error_message or result.status_code}")
        outcome.pages += 1
        page = Page(url=result.final_url or url, html=result.text, website=site.website, status=result.status_code or 0)
        extraction = await run_extractor(site.extractor, page)
        new = 0
        for item in extraction.items:
            if item.fingerprint not in outcome.items:
                outcome.items[item.fingerprint] = item
                new += 1
        nxt = site.pagination.next_url(url, pages_fetched=outcome.pages, html=result.text, new_items=new)
        if nxt is None and site.pagination.type == "next_link" and outcome.pages < site.pagination.max_pages:
            nxt = extraction.next_url
        url = nxt if nxt != url else None
    if site.detail_rules is not None and outcome.items:
        await _enqueue_details(job, site, outcome, frontier, now)
    return outcome


async def _enqueue_details(
    job: JobMessage, site: SiteConfig, outcome: JobOutcome, frontier: Frontier, now: datetime | None
) -> None:
    """Queue the detail page of every item in the frontier. Its duplicate filter drops the pages
    already queued in this revisit period (by this or an earlier run, by this or another worker); the
    website's politeness becomes the frontier's policy for the item pages' hosts."""
    now = now or datetime.now(UTC)
    period = int(now.timestamp() // max(1.0, site.revisit_age.total_seconds()))
    dedup_key = f"{site.website}:{period}"
    requests = []
    for item in outcome.items.values():
        meta = {
            DETAIL_META: {
                "item": item.fingerprint.hex(),
                "website": site.website,
                "website_id": job.website_id,
                "target_id": job.target_id,
                "browser": job.requires_playwright,
                "fields": dict(item.fields),
            }
        }
        requests.append(Request(item.url, meta=meta, dedup_key=dedup_key))
    for host in {r.host for r in requests}:
        await frontier.set_host_policy(host, delay=site.min_delay, max_in_flight=site.max_concurrency)
    outcome.details_queued = await frontier.enqueue_requests(requests)
