"""One job's pages as frontier requests: what a listing or a detail request carries, so that whichever
worker leases it -- this one or another sharing the frontier -- can fetch, extract and store it alone.

A job's listing pages form a chain: the job's owner queues the first page; whoever leases a listing
page fetches it, extracts its items, stores the new ones, queues their detail pages and the next
listing page (carrying the chain's progress), and at the end of the chain reports the outcome to the
owner (:class:`ListingOutcome`). Everything a page needs travels in its request's ``meta``, typed: the
job (with its :class:`~crawlherd.sitespec.SiteSpec`) for a listing page, the website's spec and the
listing's fields for a detail page. No worker reads a website's configuration from the database.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawlherd import _json
from crawlherd.fetch.actions import PAGE_META
from crawlherd.item import Item
from crawlherd.messages import JobMessage
from crawlherd.request import Request
from crawlherd.sitespec import SiteSpec

__all__ = [
    "DETAIL_META",
    "LISTING_META",
    "LOCAL_META",
    "LISTING_PRIORITY",
    "MARKER_HOST",
    "MARKER_META",
    "DetailPage",
    "ListingOutcome",
    "ListingState",
    "browser_meta",
    "detail_requests",
    "marker_request",
]

#: The ``meta`` key of a listing request (a :class:`ListingState`, JSON).
LISTING_META = "crawlherd.listing"
#: The ``meta`` key of a detail request (a :class:`DetailPage`, JSON).
DETAIL_META = "crawlherd.detail"
#: The ``meta`` key of the token under which the process that queued a page keeps it validated.
LOCAL_META = "crawlherd.local"
#: Listing pages are leased before detail pages: a job waits on its listing, not on its details.
LISTING_PRIORITY = 10
#: The ``meta`` key of a job's marker (its run): a request never fetched (whoever leases it acks it).
MARKER_META = "crawlherd.marker"
#: The host of the markers' URLs (``.invalid``: no such host can exist).
MARKER_HOST = "crawlherd-marker.invalid"


def marker_request(run: str) -> Request:
    """A job's marker in the frontier: queued with the job's first listing page and queued again by its
    owner while the job runs -- the frontier takes it again only when it has lost what it held (a Redis
    restarted empty), and the owner then starts its listing again. Leased, it is acked unfetched."""
    return Request(f"http://{MARKER_HOST}/{run}", meta={MARKER_META: run}, dedup_key=f"marker:{run}")


class ListingState(BaseModel):
    """A job's listing chain, carried by each listing request: the job, who owns it (``owner``, the
    worker that took the delivery; ``run``, that worker's handling of it), the number of the page the
    request is for, and what the pages before it found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job: JobMessage
    owner: str
    run: str = Field(default_factory=lambda: uuid.uuid4().hex)
    page: int = Field(default=1, ge=1)
    seen: tuple[str, ...] = ()
    items_new: int = 0
    items_updated: int = 0
    details_queued: int = 0

    def request(self, url: str) -> Request:
        """The listing request for ``url`` carrying this state (and what the browser does on the page,
        for a website that needs one). Its dedup key is the run and the page's number: a page is queued
        once per run and place in the chain -- a listing page read twice (its lease came back) does not
        queue its next page twice -- and a later run (another attempt, another slot) queues it again."""
        state = {"job": _dumped(self.job), **self.model_dump(mode="json", exclude={"job"})}
        meta = {LISTING_META: state, LOCAL_META: _KNOWN.add(self)}
        return Request(
            url, priority=LISTING_PRIORITY, meta={**meta, **browser_meta(self.job.site, listing=True)},
            dedup_key=f"listing:{self.run}:{self.page}",
        )

    @classmethod
    def of(cls, request: Request) -> ListingState | None:
        """The state a listing request carries (None for any other request): validated from its JSON,
        or -- leased back by the process that queued it -- the object it was queued with."""
        meta = request.meta
        raw = meta.get(LISTING_META)
        if raw is None:
            return None
        return _KNOWN.take(meta.get(LOCAL_META), cls) or cls.model_validate(raw)

    def next(self, *, new: Iterable[Item], items_new: int, items_updated: int, details_queued: int) -> ListingState:
        """The state after this page."""
        return self.model_copy(
            update={
                "page": self.page + 1,
                "seen": (*self.seen, *(i.fingerprint.hex() for i in new)),
                "items_new": self.items_new + items_new,
                "items_updated": self.items_updated + items_updated,
                "details_queued": self.details_queued + details_queued,
            }
        )


@dataclass(frozen=True, slots=True)
class ListingOutcome:
    """The end of a listing chain, reported to the job's owner. ``error`` None: every page was read;
    ``permanent``: another attempt cannot do better (robots.txt disallows a listing page)."""

    pages: int = 0
    items_new: int = 0
    items_updated: int = 0
    details_queued: int = 0
    error: str | None = None
    permanent: bool = False


class DetailPage(BaseModel):
    """What a detail request carries: the item (fingerprint and the listing's fields), where to store
    it, and its website's spec (detail rules, robots policy, browser)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    item: str
    website_id: int
    target_id: int
    fields: dict[str, Any]
    site: SiteSpec

    @classmethod
    def of(cls, request: Request) -> DetailPage | None:
        """What a detail request carries (None for any other request), as :meth:`ListingState.of`."""
        meta = request.meta
        raw = meta.get(DETAIL_META)
        if raw is None:
            return None
        known = _KNOWN.take(meta.get(LOCAL_META), cls)
        if known is not None:
            return known
        site = _known_site(raw.get("site")) if isinstance(raw, dict) else None
        return cls.model_validate(raw if site is None else {**raw, "site": site})


# Every detail page of a website carries the same spec: it is validated (its selectors compiled) once
# per distinct spec, not once per page. Bounded: emptied when it holds _SITES_KEPT specs.
_SITES: dict[str, SiteSpec] = {}
_SITES_KEPT = 256


def _known_site(raw: object) -> SiteSpec | None:
    """The validated spec of ``raw`` (a spec as JSON data), from the cache or validated now; None
    when it is not valid, so that the page's own validation says why, as before."""
    if not isinstance(raw, dict):
        return None
    try:
        key = _json.dumps(raw, sort_keys=True)
    except (TypeError, ValueError):
        return None
    site = _SITES.get(key)
    if site is None:
        try:
            site = SiteSpec.model_validate(raw)
        except ValidationError:
            return None
        if len(_SITES) >= _SITES_KEPT:
            _SITES.clear()
        _SITES[key] = site
    return site


# A job (and its website's spec) as JSON data, dumped once per object rather than once per listing page
# (the job's spec is most of a listing request's record, and every detail request's). The cached dict is
# shared by the requests made from it: nothing changes a request's meta in place. Bounded as _SITES.
_DUMPED: dict[int, tuple[BaseModel, dict[str, Any]]] = {}


def _dumped(model: BaseModel) -> dict[str, Any]:
    """``model.model_dump(mode="json")`` of a frozen model, from the cache when made before."""
    held = _DUMPED.get(id(model))
    if held is not None and held[0] is model:
        return held[1]
    if len(_DUMPED) >= _SITES_KEPT:
        _DUMPED.clear()
    data = model.model_dump(mode="json")
    _DUMPED[id(model)] = (model, data)  # the model held: its id is not reused while it is here
    return data


def detail_requests(job: JobMessage, items: Iterable[Item], *, now: datetime | None = None) -> list[Request]:
    """The detail requests of ``items`` (none when the website reads no detail fields). Their dedup
    key is the revisit period: a page queued in this period -- by any run, by any worker sharing the
    frontier -- is not queued again."""
    site = job.site
    if site.detail_rules is None:
        return []
    now = now or datetime.now(UTC)
    period = int(now.timestamp() // max(1.0, site.revisit_age))
    dedup_key = f"{site.name}:{period}"
    site_json = _dumped(site)
    browser = browser_meta(site, listing=False)
    out = []
    for item in items:
        detail = {
            "item": item.fingerprint.hex(),
            "website_id": job.website_id,
            "target_id": job.target_id,
            "fields": dict(item.fields),
            "site": site_json,
        }
        page = DetailPage.model_construct(  # made of validated parts
            item=detail["item"], website_id=job.website_id, target_id=job.target_id, fields=dict(item.fields), site=site
        )
        meta = {DETAIL_META: detail, LOCAL_META: _KNOWN.add(page), **browser}
        out.append(Request(item.url, meta=meta, dedup_key=dedup_key))
    return out


def browser_meta(site: SiteSpec, *, listing: bool) -> dict[str, Any]:
    """What a page of ``site`` asks of the browser in its ``meta``: the page actions (``wait_for``;
    on a listing page, scroll or load-more pagination) and, when the website keeps the screenshots
    of failed pages, a screenshot (kept only if the page fails, see :mod:`crawlherd.worker.screenshots`)."""
    meta: dict[str, Any] = {}
    actions = site.page_actions(listing=listing)
    if actions:
        meta[PAGE_META] = actions.to_meta()
    if site.requires_playwright and site.browser.failure_screenshots:
        meta["crawlherd.screenshot"] = True
    return meta


_M = TypeVar("_M", bound=BaseModel)


class _Known:
    """The pages this process queued, as the validated objects they were made from, by the token their
    request carries (``meta[LOCAL_META]``): a page this process leases back is taken from here instead
    of being validated again from its JSON. A process that did not queue it (another worker sharing
    the frontier, this one restarted or forked) holds no such token, and validates. Bounded in number
    and in age: with workers sharing a frontier, most pages one queues are leased by the others and
    never taken back here, so a page is forgotten after ``ttl`` seconds or once ``kept`` newer ones are
    held (it is then validated when leased, as before)."""

    def __init__(self, kept: int = 4096, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._kept = kept
        self._ttl = ttl
        self._clock = clock
        self._pid = -1
        self._prefix = ""
        self._serial = itertools.count()
        self._pages: OrderedDict[str, tuple[float, BaseModel]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pages)

    def add(self, page: BaseModel) -> str:
        if os.getpid() != self._pid:  # a new process (forked): nothing of its parent's is its own
            self._pid, self._prefix = os.getpid(), f"{uuid.uuid4().hex[:16]}-{os.getpid()}."
            self._pages.clear()
        token = f"{self._prefix}{next(self._serial)}"
        pages, now = self._pages, self._clock()
        while pages and (len(pages) >= self._kept or next(iter(pages.values()))[0] <= now - self._ttl):
            pages.popitem(last=False)
        pages[token] = (now, page)
        return token

    def take(self, token: object, cls: type[_M]) -> _M | None:
        if not isinstance(token, str) or not self._prefix or not token.startswith(self._prefix):
            return None
        if os.getpid() != self._pid:
            return None
        held = self._pages.pop(token, None)
        return held[1] if held is not None and isinstance(held[1], cls) else None


_KNOWN = _Known()
