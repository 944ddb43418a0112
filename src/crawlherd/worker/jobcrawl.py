"""Crawl one scrape job through the engine: the search URL, its pagination, the items on each page,
and (when the website has detail fields) the detail pages of items not seen within the revisit age.

Politeness: every fetch of a job goes through a dispatcher with the website's ``RateLimiter``
(``min_delay`` spacing per domain, Retry-After and back-off on 429/503 with re-fetches), and at most
``max_concurrency`` detail pages of one website are in flight in this worker. The worker keeps one
rate limiter per website, so concurrent jobs of one website share the spacing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from crawlherd.crawler import Crawler
from crawlherd.dispatch import MemoryAdaptiveDispatcher, RateLimiter, SemaphoreDispatcher
from crawlherd.dispatch.base import Dispatcher
from crawlherd.errors import ConfigurationError, JobError
from crawlherd.extract.handlers import Handler, resolve_extractor, run_extractor
from crawlherd.extract.pagination import Pagination
from crawlherd.extract.rules import ExtractionRules, Item, Page
from crawlherd.messages import JobMessage
from crawlherd.request import Request
from crawlherd.result import CrawlResult
from crawlherd.sinks.base import ItemSink
from crawlherd.sinks.sql import DETAIL_AT

__all__ = ["DEFAULT_REVISIT_AGE", "JobOutcome", "SiteConfig", "crawl_job"]

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
    detail_pages: int = 0
    items: dict[bytes, Item] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


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
    return results[0]


async def crawl_job(
    job: JobMessage,
    *,
    crawler: Crawler,
    sink: ItemSink,
    limiters: RateLimiters,
    dispatcher_kind: str = "semaphore",
    now: datetime | None = None,
) -> JobOutcome:
    """Crawl ``job`` with ``crawler`` (HTTP or browser, chosen by the caller) and return what it found.

    A listing page that cannot be fetched or read fails the job (:class:`JobError`), so that the worker
    retries it; a detail page that fails is recorded in ``errors`` and its item kept with the listing's
    fields.
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
        dispatcher = make_dispatcher(dispatcher_kind, site.max_concurrency, limiter)
        await _fetch_details(site, outcome, crawler, sink, dispatcher, now)
    return outcome


async def _fetch_details(
    site: SiteConfig,
    outcome: JobOutcome,
    crawler: Crawler,
    sink: ItemSink,
    dispatcher: Dispatcher,
    now: datetime | None,
) -> None:
    assert site.detail_rules is not None
    now = now or datetime.now(UTC)
    fresh = await sink.detailed_since(outcome.items, now - site.revisit_age)
    todo = [item for fp, item in outcome.items.items() if fp not in fresh]
    if not todo:
        return
    requests = [Request(item.url, meta={"item": item.fingerprint.hex()}) for item in todo]
    stream = await crawler.arun_many(requests, dispatcher=dispatcher, stream=True)
    async with stream:
        async for result in stream:
            request = result.request
            if request is None:
                continue
            fp = bytes.fromhex(request.meta["item"])
            item = outcome.items[fp]
            if not result.success:
                outcome.errors.append(f"detail page {result.url}: {result.error_message}")
                continue
            outcome.detail_pages += 1
            detail: dict[str, Any] = site.detail_rules.extract_detail(result.text, result.final_url or result.url)
            fields = {**item.fields, **{k: v for k, v in detail.items() if v not in (None, "", [])}}
            fields[DETAIL_AT] = now.isoformat()
            outcome.items[fp] = Item(website=item.website, url=item.url, fingerprint=fp, fields=fields)
