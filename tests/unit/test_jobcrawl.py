"""What a detail request carries, read back as the worker reads it (through JSON, as from Redis)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from crawlherd.demo.targets import demo_targets
from crawlherd.item import make_item
from crawlherd.messages import JobMessage, idempotency_key
from crawlherd.request import Request
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.jobcrawl import (
    DETAIL_META,
    LISTING_META,
    LOCAL_META,
    DetailPage,
    ListingState,
    detail_requests,
)


def _job(site: SiteSpec) -> JobMessage:
    now = datetime.now(UTC)
    return JobMessage(job_id=str(uuid.uuid4()), idempotency_key=idempotency_key(1, now), target_id=1, slot_at=now,
                      website_id=2, site=site, search_url="http://x/browse/a/b", keywords_used="a", created_at=now)


def _through_json(request: Request) -> Request:
    return Request(request.url, meta=json.loads(json.dumps(request.meta)))


def test_every_detail_page_of_a_website_shares_one_validated_spec() -> None:
    site = SiteSpec.model_validate(demo_targets("http://x")["websites"][1])  # reads detail fields
    items = [make_item(site.name, f"http://x/jobs/{i}", {"title": str(i)}) for i in range(3)]
    pages = [DetailPage.of(_through_json(r)) for r in detail_requests(_job(site), items)]
    assert all(p is not None for p in pages)
    specs = {id(p.site) for p in pages if p is not None}
    assert len(specs) == 1  # validated (selectors compiled) once, not once per page
    first = pages[0]
    assert first is not None and first.site == site and first.fields == {"title": "0"} and first.website_id == 2


def test_a_job_dumped_once_is_what_each_of_its_requests_carries() -> None:
    site = SiteSpec.model_validate(demo_targets("http://x")["websites"][1])
    job = _job(site)
    first = ListingState(job=job, owner="w1")
    later = first.next(new=[make_item(site.name, "http://x/jobs/1", {})], items_new=1, items_updated=0,
                       details_queued=1)
    for state in (first, later, first):  # the job's dump made once, reused: each page's own fields kept
        carried = state.request("http://x/browse/a/b?page=2").meta[LISTING_META]
        assert carried == state.model_dump(mode="json")
        assert ListingState.model_validate(json.loads(json.dumps(carried))) == state
    other = _job(site)  # another job (another id): its own dump
    assert ListingState(job=other, owner="w1").request("http://x/p").meta[LISTING_META]["job"]["job_id"] == other.job_id
    detail = detail_requests(job, [make_item(site.name, "http://x/jobs/2", {})])[0]
    assert detail.meta[DETAIL_META]["site"] == site.model_dump(mode="json")


def test_a_bad_spec_in_a_detail_request_is_refused_as_before() -> None:
    site = SiteSpec.model_validate(demo_targets("http://x")["websites"][1])
    request = detail_requests(_job(site), [make_item(site.name, "http://x/jobs/1", {})])[0]
    meta = json.loads(json.dumps(request.meta))
    meta[DETAIL_META]["site"]["extraction"]["item_selector"] = "[[["  # not a CSS selector
    del meta[LOCAL_META]  # as read by another worker: validated
    with pytest.raises(ValidationError, match=r"site\n.*not a valid CSS selector"):
        DetailPage.of(Request(request.url, meta=meta))


def test_a_page_leased_back_by_the_process_that_queued_it_is_not_validated_again() -> None:
    site = SiteSpec.model_validate(demo_targets("http://x")["websites"][1])
    job = _job(site)
    items = [make_item(site.name, f"http://x/jobs/{i}", {"title": str(i)}) for i in range(2)]
    first, second = detail_requests(job, items)
    listing = ListingState(job=job, owner="w").request("http://x/browse/a/b?page=2")
    # through JSON as from Redis: the same process finds its validated objects by their token
    page = DetailPage.of(_through_json(first))
    assert page is not None and page.site is site and page.fields == {"title": "0"}
    assert page.item == items[0].fingerprint.hex()
    state = ListingState.of(_through_json(listing))
    assert state is not None and state.job is job
    # another process (no such token) validates, and gets the same values
    meta = json.loads(json.dumps(second.meta))
    meta[LOCAL_META] = "elsewhere.1"
    other = DetailPage.of(Request(second.url, meta=meta))
    assert other is not None and other.site == site and other.fields == {"title": "1"}
    meta = json.loads(json.dumps(listing.meta))
    meta[LOCAL_META] = "elsewhere.2"
    again = ListingState.of(Request(listing.url, meta=meta))
    assert again is not None and again.job == job and again.job is not job


def test_the_pages_kept_for_a_lease_back_are_bounded_in_number_and_age() -> None:
    """Workers sharing a frontier lease most of each other's pages: the ones this process queued and
    never took back must not pile up (the 30-minute soak saw them grow without end)."""
    from pydantic import BaseModel

    from crawlherd.worker.jobcrawl import _Known

    class Page(BaseModel):
        number: int

    now = [0.0]
    known = _Known(kept=3, ttl=10.0, clock=lambda: now[0])
    state = Page(number=1)
    tokens = [known.add(state) for _ in range(5)]
    assert len(known) == 3  # the oldest two forgotten
    assert known.take(tokens[0], Page) is None  # forgotten: validated from its JSON instead
    assert known.take(tokens[4], Page) is state
    now[0] = 10.0
    known.add(state)  # the two left are 10 s old: gone
    assert len(known) == 1
    for _ in range(1000):  # never taken back (leased by another worker): stays at the bound
        known.add(state)
    assert len(known) == 3
