"""The browser's part of a website's spec (scroll / load_more pagination, [browser] wait_for and
failure screenshots), the page actions and session a request carries, and crawl4ai's wait_for on
CrawlerRunConfig: typed, validated once, clear errors."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from crawlherd import CrawlerRunConfig
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.actions import PAGE_META, BrowserPagination, PageActions, parse_wait_for
from crawlherd.fetch.contexts import BrowserSession
from crawlherd.messages import JobMessage, idempotency_key
from crawlherd.request import Request
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.jobcrawl import ListingState, detail_requests

BASE = {
    "name": "js", "base_url": "https://example.com", "search_url_template": "https://example.com/s?q={keywords}",
    "requires_playwright": True,
    "extraction": {"item_selector": "li.job", "item_url": "a@href", "fields": {"t": "a"}, "detail_fields": {"d": "p"}},
}


def test_scroll_and_load_more_become_the_browsers_page_actions() -> None:
    spec = SiteSpec.model_validate({
        **BASE, "pagination": {"type": "scroll", "max_pages": 30, "settle": "1500ms"},
        "browser": {"wait_for": "css:li.job", "wait_timeout": "20s", "failure_screenshots": True},
    })
    actions = spec.page_actions(listing=True)
    assert actions == PageActions(
        wait_for="css:li.job", wait_timeout=20.0,
        pagination=BrowserPagination(type="scroll", item_selector="li.job", max_pages=30, settle=1.5),
    )
    assert spec.page_actions(listing=False) == PageActions(wait_for="css:li.job", wait_timeout=20.0)
    assert spec.paginator.next_url("https://example.com/s?q=a", pages_fetched=1) is None  # one page
    more = SiteSpec.model_validate({**BASE, "pagination": {"type": "load_more", "selector": "button.more",
                                                          "item_selector": "div.card"}})
    p = more.page_actions(listing=True).pagination
    assert p is not None and (p.type, p.selector, p.item_selector, p.max_pages) == ("load_more", "button.more",
                                                                                    "div.card", 10)
    assert SiteSpec.model_validate_json(spec.model_dump_json()) == spec


def test_the_job_message_carries_them_to_each_listing_and_detail_request() -> None:
    spec = SiteSpec.model_validate({**BASE, "pagination": {"type": "load_more", "selector": "#more"},
                                    "browser": {"wait_for": "js:() => window.ok", "failure_screenshots": True}})
    now = datetime.now(UTC)
    job = JobMessage(job_id=str(uuid.uuid4()), idempotency_key=idempotency_key(1, now), target_id=1, slot_at=now,
                     website_id=1, site=spec, search_url="https://example.com/s?q=a", keywords_used="a",
                     created_at=now)
    job = JobMessage.model_validate_json(job.model_dump_json())  # as a worker gets it
    listing = ListingState(job=job, owner="w").request(job.search_url)
    assert PageActions.from_meta(listing.meta[PAGE_META]) == spec.page_actions(listing=True)
    assert listing.meta["crawlherd.screenshot"] is True
    from crawlherd.item import make_item

    item = make_item("js", "https://example.com/job/1", {"t": "x"})
    [detail] = detail_requests(job, [item])
    assert PageActions.from_meta(detail.meta[PAGE_META]) == PageActions(wait_for="js:() => window.ok")
    plain = SiteSpec.model_validate({**BASE, "requires_playwright": False})
    job2 = job.model_copy(update={"site": plain})
    assert PAGE_META not in ListingState(job=job2, owner="w").request(job.search_url).meta


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"requires_playwright": False, "pagination": {"type": "scroll"}}, "set requires_playwright = true"),
        ({"requires_playwright": False, "browser": {"wait_for": "#x"}}, "need requires_playwright = true"),
        ({"pagination": {"type": "load_more"}}, "load_more needs a 'selector'"),
        ({"pagination": {"type": "scroll", "selector": "a"}}, "scroll takes no 'selector'"),
        ({"pagination": {"type": "next_link", "selector": "a", "item_selector": "li"}}, "item_selector is for"),
        ({"pagination": {"type": "scroll", "item_selector": "li[["}}, "not a valid CSS selector"),
        ({"pagination": {"type": "scroll", "settle": "forever"}}, "settle"),
        ({"browser": {"wait_for": "js:"}}, "is empty"),
        ({"browser": {"wait_timeout": 0}}, "wait_timeout"),
        ({"browser": {"failure_screenshots": "yes"}}, "failure_screenshots"),
        ({"browser": {"wait_for_it": "#x"}}, "wait_for_it"),
    ],
)
def test_a_bad_browser_setting_is_refused_where_it_is_declared(change: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        SiteSpec.model_validate({**BASE, **change})


def test_wait_for_forms_and_crawlerrunconfig() -> None:
    assert parse_wait_for("css: .a") == ("css", ".a")
    assert parse_wait_for("JS:() => 1") == ("js", "() => 1")
    assert parse_wait_for("#x") == ("css", "#x")
    config = CrawlerRunConfig(wait_for="css:.done", screenshot=True)
    assert config.request_meta()[PAGE_META] == {"wait_for": "css:.done"}
    with pytest.raises(ConfigurationError, match="empty"):
        CrawlerRunConfig(wait_for="css:")
    legacy = Request("https://example.com/", meta={"wait_for": "#old"})
    assert PageActions.of(legacy) == PageActions(wait_for="#old")
    with pytest.raises(ConfigurationError, match="meta"):
        PageActions.of(Request("https://example.com/", meta={PAGE_META: "scroll please"}))


def test_a_session_in_meta_becomes_a_browser_context_setting() -> None:
    meta = {"crawlherd.session": {
        "id": "s", "proxy": "http://us%40er:p%3Ass@proxy.example:3128",
        "headers": {"User-Agent": "UA/1", "X-A": "1"},
        "cookies": [{"name": "sid", "value": "v", "domain": ".example.com", "path": "/"}, {"name": "n", "value": "w"}],
    }}
    session = BrowserSession.of(Request("https://example.com/", meta=meta))
    assert session is not None
    assert session.proxy_settings() == {"server": "http://proxy.example:3128", "username": "us@er", "password": "p:ss"}
    assert session.user_agent == "UA/1" and session.extra_headers() == {"X-A": "1"}
    assert session.playwright_cookies("https://example.com/x") == [
        {"name": "sid", "value": "v", "domain": ".example.com", "path": "/"},  # the subdomains too
        {"name": "n", "value": "w", "url": "https://example.com/x"},
    ]
    assert BrowserSession.of(Request("https://example.com/")) is None
    bad = {"crawlherd.session": {"id": "s", "proxy": "ftp://u:secret@h:1"}}
    with pytest.raises(ConfigurationError, match="http://, https:// or socks5://") as info:
        BrowserSession.of(Request("https://example.com/", meta=bad))
    assert "secret" not in str(info.value)


def test_the_worked_example_of_the_docs_is_a_valid_targets_file() -> None:
    import tomllib

    from tests.support.docblocks import doc_block

    document = tomllib.loads(doc_block("browser-targets", "service.md"))
    specs = [SiteSpec.model_validate(w) for w in document["websites"]]
    scrolling, button = specs
    assert scrolling.page_actions(listing=True).pagination == BrowserPagination(
        type="scroll", item_selector="li.job", max_pages=25, settle=3.0
    )
    assert scrolling.browser.failure_screenshots and scrolling.browser.wait_timeout == 20.0
    more = button.page_actions(listing=True)
    assert more.pagination is not None and more.pagination.selector == "button.show-more"
    assert more.pagination.item_selector == "div.opening"  # the extraction's
    assert {t["website"] for t in document["targets"]} == {"scrolling-jobs", "button-jobs"}
