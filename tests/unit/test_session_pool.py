"""The worker's session pool on the memory store (issue 21): which proxy a page goes through, what a block
page, a lapsed login and an error change, tiers up and down, and when a page ends "blocked"."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from crawlherd.errors import FetchError, RetryLater
from crawlherd.fetch.gate import check_veto
from crawlherd.fetch.session import SESSION_META
from crawlherd.request import Request
from crawlherd.result import CrawlResult
from crawlherd.sessions.memory import MemorySessions
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.sessions import SessionPool


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _site(**fetch: Any) -> SiteSpec:
    return SiteSpec.model_validate({
        "name": "board", "base_url": "https://board.example", "search_url_template": "https://board.example/s?q={keywords}",
        "fetch": {"user_agent": "Mozilla/5.0 t", **fetch},
    })


def _answer(status: int = 200, body: str = "<p>ok</p>", url: str | None = None, **extra: Any):  # type: ignore[no-untyped-def]
    seen: list[dict[str, Any]] = []

    async def fetch(request: Request) -> CrawlResult:
        seen.append(request.meta[SESSION_META])
        return CrawlResult(url=request.url, success=status < 400, status_code=status, final_url=url or request.url,
                           body=body.encode(), headers={"content-type": "text/html"}, request=request, **extra)

    return fetch, seen


async def _pool(clock: Clock) -> SessionPool:
    async def no_login(request: Request) -> CrawlResult:
        raise AssertionError("no login configured")

    return SessionPool(MemorySessions(), send=no_login, clock=clock)


async def test_pages_spread_over_the_proxies_of_the_first_tier() -> None:
    clock = Clock()
    pool = await _pool(clock)
    site = _site(proxies=[["http://a:1", "http://u:pw@b:1"], ["http://c:1"]])
    fetch, seen = _answer()
    for n in range(6):
        result = await pool.fetch(site, Request(f"https://board.example/{n}"), fetch)
        assert result.success
    assert Counter(s["proxy"] for s in seen) == {"http://a:1": 3, "http://u:pw@b:1": 3}
    assert {s["headers"]["User-Agent"] for s in seen} == {"Mozilla/5.0 t"}
    sessions = await pool.store.sessions("board")
    assert {s.proxy for s in sessions} == {"http://a:1", "http://u:***@b:1"}  # no credential in the store
    assert sum(s.uses for s in sessions) == 6


async def test_a_block_rests_the_proxy_and_the_page_goes_back() -> None:
    clock = Clock()
    pool = await _pool(clock)
    site = _site(proxies=["http://a:1", "http://b:1"], ban={"cool_off": "30s", "markers": ["captcha"]})
    blocked, _ = _answer(200, "<div>captcha</div>")
    with pytest.raises(RetryLater):
        await pool.fetch(site, Request("https://board.example/1"), blocked)
    health = await pool.store.health("board")
    [label] = [k for k, v in health.proxies.items() if v.blocks == 1]
    assert health.proxy(label).rest_until == 1030.0
    [retired] = [s for s in await pool.store.sessions("board") if s.retired]
    assert retired.retired == "blocked: block page (matches 'captcha')"
    ok, seen = _answer()
    for n in range(3):  # while it rests, only the other proxy is used
        await pool.fetch(site, Request(f"https://board.example/x{n}"), ok)
    assert {s["proxy"] for s in seen} == {"http://a:1", "http://b:1"} - {label}
    clock.now = 1031.0  # rested: used again (the least used first)
    await pool.fetch(site, Request("https://board.example/y"), ok)
    assert seen[-1]["proxy"] == label


async def test_a_request_waiting_at_the_gate_through_a_proxy_that_came_to_rest_is_not_sent() -> None:
    """Two pages through one proxy: the first waits at the send gate while the second meets a block page;
    let go by the gate, the first is not sent (the site would see one more request from an identity it
    just banned) and its page goes back to the frontier; the next page waits for the proxy's rest."""
    clock = Clock()
    pool = await _pool(clock)
    site = _site(proxies=["http://a:1"], ban={"cool_off": "30s", "markers": ["captcha"]})
    gate = asyncio.Event()
    sent: list[str] = []

    async def fetch(request: Request) -> CrawlResult:  # as a fetcher behind a send gate, under a crawler
        if request.url.endswith("/first"):
            await gate.wait()
        try:
            check_veto(request.url)
        except FetchError as exc:
            return CrawlResult(url=request.url, success=False, error_type=type(exc).__name__,
                               error_message=str(exc), request=request)
        sent.append(request.url)
        body = "<div>captcha</div>" if request.url.endswith("/second") else "<p>ok</p>"
        return CrawlResult(url=request.url, success=True, status_code=200, body=body.encode(),
                           headers={"content-type": "text/html"}, request=request)

    first = asyncio.ensure_future(pool.fetch(site, Request("https://board.example/first"), fetch))
    await asyncio.sleep(0.01)
    with pytest.raises(RetryLater):  # a block page: the proxy rests
        await pool.fetch(site, Request("https://board.example/second"), fetch)
    gate.set()
    with pytest.raises(RetryLater, match="not sent: http://a:1 rests for board after a block page"):
        await first
    assert sent == ["https://board.example/second"]
    with pytest.raises(RetryLater) as later:
        await pool.fetch(site, Request("https://board.example/third"), fetch)
    assert later.value.delay == pytest.approx(30.0)
    assert sent == ["https://board.example/second"]


async def test_a_login_waiting_at_the_gate_through_a_proxy_that_came_to_rest_is_not_sent() -> None:
    """The same for a session's login (sent by the fetcher itself, which raises what it raises): not sent,
    and the page goes back to the frontier -- it does not fail."""
    clock = Clock()
    gate = asyncio.Event()
    sent: list[str] = []

    async def login(request: Request) -> CrawlResult:  # the fetcher: its errors raised
        await gate.wait()
        check_veto(request.url)
        sent.append(request.url)
        raise AssertionError("the login must not be sent")

    pool = SessionPool(MemorySessions(), send=login, clock=clock)
    site = _site(proxies=["http://a:1"], ban={"cool_off": "30s", "markers": ["captcha"]},
                 login={"url": "https://board.example/login", "form": {"user": "u"}})
    first = asyncio.ensure_future(pool.fetch(site, Request("https://board.example/first"), _answer()[0]))
    await asyncio.sleep(0.01)
    [session] = await pool.store.sessions("board")
    with pytest.raises(RetryLater):  # a block page another page met through the same proxy
        await pool._blocked(site, Request("https://board.example/second"), session, "captcha")
    gate.set()
    with pytest.raises(RetryLater, match="not sent: http://a:1 rests for board after a block page"):
        await first
    assert sent == []


async def test_every_proxy_resting_the_page_waits_then_ends_blocked() -> None:
    clock = Clock()
    pool = await _pool(clock)
    site = _site(ban={"cool_off": "10s"})  # no proxy: one identity, two blocks per page
    forbidden, _ = _answer(403, "no")
    page = Request("https://board.example/1")
    with pytest.raises(RetryLater):
        await pool.fetch(site, page, forbidden)
    with pytest.raises(RetryLater) as waiting:
        await pool.fetch(site, page, forbidden)
    assert waiting.value.delay == pytest.approx(10.0)
    clock.now += 10.0
    result = await pool.fetch(site, page, forbidden)
    assert not result.success and result.error_type == "BlockedError"
    assert result.error_message is not None and result.error_message.startswith("blocked: HTTP 403")
    assert "every proxy tier (1 identity)" in result.error_message


async def test_tiers_go_up_after_blocks_and_down_after_successes() -> None:
    clock = Clock()
    pool = await _pool(clock)
    site = _site(proxies=[["http://a:1", "http://b:1"], ["http://c:1"]],
                 ban={"escalate_after": 2, "descend_after": 3, "cool_off": "1s"})
    forbidden, _ = _answer(403)
    for n in range(2):
        with pytest.raises(RetryLater):
            await pool.fetch(site, Request(f"https://board.example/{n}"), forbidden)
    assert (await pool.store.health("board")).tier == 1
    clock.now += 2
    ok, seen = _answer()
    for n in range(3):
        await pool.fetch(site, Request(f"https://board.example/ok{n}"), ok)
    assert [s["proxy"] for s in seen] == ["http://c:1"] * 3
    assert (await pool.store.health("board")).tier == 0
    await pool.fetch(site, Request("https://board.example/again"), ok)
    assert seen[-1]["proxy"] in ("http://a:1", "http://b:1")


async def test_a_429_with_retry_after_is_not_a_ban() -> None:
    pool = await _pool(Clock())
    site = _site(proxies=["http://a:1"])
    fetch, _ = _answer(429)

    async def with_retry_after(request: Request) -> CrawlResult:
        r = await fetch(request)
        r.headers = {"retry-after": "5"}
        return r

    result = await pool.fetch(site, Request("https://board.example/1"), with_retry_after)
    assert result.status_code == 429  # handed to the dispatcher's politeness, the proxy not blamed
    assert (await pool.store.health("board")).proxy("http://a:1").blocks == 0


async def test_cookies_the_site_sets_are_kept_in_the_session() -> None:
    pool = await _pool(Clock())
    site = _site(cookies={"consent": "yes"})
    cookie = {"name": "sid", "value": "1", "domain": "board.example", "path": "/"}
    setting, _ = _answer(cookies=[cookie])
    await pool.fetch(site, Request("https://board.example/1"), setting)
    ok, seen = _answer()
    await pool.fetch(site, Request("https://board.example/2"), ok)
    assert {c["name"]: c["value"] for c in seen[0]["cookies"]} == {"consent": "yes", "sid": "1"}
