"""The requests of a run, made from what the caller gave: ``arun_many``'s URLs validated and
deduplicated before the first fetch (:func:`plan_many`), a run's options put on each request
(:func:`run_request`), the failed result of what cannot be fetched (:func:`failed`), and the domain
test of a crawl's links (:func:`in_domains`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from crawlherd.crawler.stream import CrawlRun
from crawlherd.errors import CrawlherdError, FetchError, InvalidURLError
from crawlherd.request import Request, plain_get
from crawlherd.result import CrawlResult, encode_png

__all__ = ["Plan", "failed", "in_domains", "plan_many", "run_request"]


def run_request(item: str | Request, run: CrawlRun, **kw: Any) -> Request:
    """``item`` as a request of ``run``: the run's meta and headers under the request's own. A URL
    that is not one raises InvalidURLError."""
    meta = run.meta
    headers = run.config.headers
    if isinstance(item, Request):
        if meta or headers:
            return item.replace(meta={**item.meta, **meta}, headers={**headers, **item.headers})
        return item
    if not isinstance(item, str):
        raise InvalidURLError(f"expected a URL string or a Request, got {type(item).__name__}: {item!r:.100}")
    return Request(item, meta=meta or None, headers=headers or None, **kw)


def failed(url: str, exc: CrawlherdError, request: Request | None = None) -> CrawlResult:
    """The failed result of ``url``: ``exc`` says why (and shows it, when a browser took a screenshot)."""
    return CrawlResult(
        url=url,
        success=False,
        error_message=str(exc),
        error_type=type(exc).__name__,
        request=request,
        depth=request.depth if request is not None else 0,
        screenshot=encode_png(exc.screenshot) if isinstance(exc, FetchError) else None,
    )


def in_domains(host: str, domains: frozenset[str]) -> bool:
    """``host`` is one of ``domains`` or a subdomain of one: a set look-up per label, not a scan of the
    domains (a crawl seeded with hundreds of hosts allows hundreds)."""
    if host in domains:
        return True
    dot = host.find(".")
    while dot >= 0:
        if host[dot + 1 :] in domains:
            return True
        dot = host.find(".", dot + 1)
    return False


class Plan:
    """``arun_many``'s URLs, each once: ``urls`` (the URL as a Request keeps it, or the Request given),
    ``hosts`` and ``fps`` (fingerprints) -- three flat lists, not an object per URL: nothing for the
    garbage collector to visit --, the ``invalid`` ones' failed results, and ``plain`` when none has a
    priority or a not-before time (the frontier may then take them lazily)."""

    __slots__ = ("fps", "hosts", "invalid", "plain", "urls")

    def __init__(self) -> None:
        self.invalid: list[CrawlResult] = []
        self.urls: list[str | Request] = []
        self.hosts: list[str] = []
        self.fps: list[bytes] = []
        self.plain = True

    def requests(self, run: CrawlRun) -> Iterator[Request]:
        """The requests, made as they are taken (:meth:`MemoryFrontier.enqueue_lazily`)."""
        meta, headers = run.meta or None, run.config.headers or None
        for u, h, f in zip(self.urls, self.hosts, self.fps, strict=True):
            yield Request.of_plain_get(u, h, f, meta, headers) if isinstance(u, str) else u


def plan_many(items: Iterable[str | Request], run: CrawlRun) -> Plan:
    """Validate and deduplicate ``items`` before the first fetch: a repeated URL is answered with its
    first one's result (``run.dups``), so every repeat must be known before any result is reported."""
    plan = Plan()
    seen: set[bytes] = set()
    meta, headers = run.meta or None, run.config.headers or None
    for item in items:
        try:
            if isinstance(item, str):
                url, host, fp = plain_get(item)
                entry: str | Request = url
            else:
                entry = run_request(item, run)
                host, fp = entry.host, entry.fingerprint
                plan.plain = plan.plain and not entry.priority and entry.not_before is None
        except InvalidURLError as exc:
            plan.invalid.append(failed(str(item), exc))
            continue
        if fp in seen:
            repeat = Request.of_plain_get(entry, host, fp, meta, headers) if isinstance(entry, str) else entry
            run.dups.setdefault(fp, []).append(repeat)
        else:
            seen.add(fp)
            plan.urls.append(entry)
            plan.hosts.append(host)
            plan.fps.append(fp)
    return plan
