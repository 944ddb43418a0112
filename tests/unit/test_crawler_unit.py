"""Crawler logic with a MockFetcher (no network): link following, domains, depth, cache, input."""

from __future__ import annotations

import asyncio

import pytest

from crawlherd import Crawler, CrawlerRunConfig, Request
from crawlherd.clock import FakeClock
from crawlherd.errors import ConfigurationError
from crawlherd.extract.links import extract_links
from crawlherd.fetch import FetchLimits, HostGate, MockFetcher, MockResponse
from crawlherd.fetch.gate import pass_gate

PAGE = (
    b"<html><body><a href='http://other.example/a'>o</a> <a href='http://sub.site.example/b'>s</a>"
    b" <a href='/c#frag'>c</a> <a href='javascript:void(0)'>j</a> <a href='mailto:a@b'>m</a></body></html>"
)


def link_fetcher() -> MockFetcher:
    """Every URL answers the same page of links."""
    return MockFetcher(lambda request: MockResponse(200, PAGE, content_type="text/html; charset=utf-8"))


def test_extract_links() -> None:
    links = extract_links(PAGE.decode(), "http://site.example/dir/page")
    assert links == ["http://other.example/a", "http://sub.site.example/b", "http://site.example/c"]


async def test_default_domains_are_the_seeds_hosts_and_subdomains() -> None:
    f = link_fetcher()
    async with Crawler(fetcher=f) as crawler:
        results = await crawler.crawl(["http://site.example/"], max_pages=10, max_depth=1, delay=0, stream=False)
    assert sorted(r.url for r in results) == [
        "http://site.example/", "http://site.example/c", "http://sub.site.example/b",
    ]
    assert max(r.depth for r in results) == 1


async def test_allowed_domains_star_and_explicit() -> None:
    async with Crawler(fetcher=link_fetcher()) as crawler:
        anywhere = await crawler.crawl(
            ["http://site.example/"], max_pages=10, max_depth=1, delay=0, allowed_domains=["*"], stream=False
        )
        only_other = await crawler.crawl(
            ["http://site.example/"], max_pages=10, max_depth=1, delay=0, allowed_domains=["other.example"],
            stream=False,
        )
    assert "http://other.example/a" in {r.url for r in anywhere} and len(anywhere) == 4
    assert sorted(r.url for r in only_other) == ["http://other.example/a", "http://site.example/"]


async def test_links_a_crawl_does_not_follow_are_read_when_asked_and_a_page_s_links_queued_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[str] = []
    import crawlherd.crawler.follow as follow

    real = follow.extract_links_async

    async def counted(html: str, base_url: str) -> list[str]:
        read.append(base_url)
        return await real(html, base_url)

    monkeypatch.setattr(follow, "extract_links_async", counted)
    async with Crawler(fetcher=link_fetcher()) as crawler:
        calls: list[int] = []
        stream = await crawler.crawl(["http://site.example/"], max_pages=10, max_depth=1, delay=0)
        many = stream.run.enqueue_many
        assert many is not None

        async def enqueue_many(requests: list[Request]) -> list[bool]:
            calls.append(len(requests))
            return await many(requests)

        stream.run.enqueue_many = enqueue_many
        async with stream:
            results = [r async for r in stream]
    assert read == ["http://site.example/"]  # the pages at depth 1 have none to follow: not read
    assert calls == [2]  # the seed's two links to follow, in one call
    deepest = [r for r in results if r.depth == 1]
    assert len(deepest) == 2 and all(r.to_dict()["links"] == 3 for r in deepest)
    assert all(r.links == extract_links(PAGE.decode(), r.url) for r in deepest)


async def test_max_pages_counts_queued_pages() -> None:
    async with Crawler(fetcher=link_fetcher()) as crawler:
        results = await crawler.crawl(["http://site.example/"], max_pages=2, max_depth=5, delay=0, stream=False)
    assert len(results) == 2


async def test_cache_refresh_updates_and_enabled_reads() -> None:
    f = link_fetcher()
    async with Crawler(fetcher=f) as crawler:
        await crawler.arun("http://site.example/", CrawlerRunConfig(cache_mode="refresh"))
        await crawler.arun("http://site.example/", CrawlerRunConfig(cache_mode="refresh"))
        hit = await crawler.arun("http://site.example/", CrawlerRunConfig(cache_mode="enabled"))
    assert len(f.requests) == 2 and hit.success and hit.body == PAGE


REFRESH, ENABLED = CrawlerRunConfig(cache_mode="refresh"), CrawlerRunConfig(cache_mode="enabled")


async def test_the_cache_is_bounded_by_default() -> None:
    """Without options the cache keeps a bounded number of pages: the oldest goes first."""
    f = link_fetcher()
    async with Crawler(fetcher=f) as crawler:
        for n in range(1001):
            await crawler.arun(f"http://site.example/{n}", REFRESH)
        fetched = len(f.requests)
        await crawler.arun("http://site.example/1000", ENABLED)  # the newest: still kept
        assert len(f.requests) == fetched
        await crawler.arun("http://site.example/0", ENABLED)  # the oldest: forgotten, fetched again
        assert len(f.requests) == fetched + 1


async def test_the_cache_is_bounded_in_entries_and_bytes() -> None:
    body = b"<html>" + b"x" * 94  # 100 bytes
    f = MockFetcher(lambda request: MockResponse(200, body, content_type="text/html"))
    urls = [f"http://site.example/{n}" for n in range(4)]
    async with Crawler(fetcher=f, cache_max_entries=3, cache_max_bytes=10_000) as crawler:
        for url in urls:
            await crawler.arun(url, REFRESH)
        await crawler.arun(urls[3], ENABLED)
        await crawler.arun(urls[1], ENABLED)  # read: now the most recently used
        assert len(f.requests) == 4
        await crawler.arun(urls[0], ENABLED)  # the fourth page pushed the first out
        assert len(f.requests) == 5
        await crawler.arun(urls[1], ENABLED)
        assert len(f.requests) == 5
    f = MockFetcher(lambda request: MockResponse(200, body, content_type="text/html"))
    async with Crawler(fetcher=f, cache_max_entries=100, cache_max_bytes=250) as crawler:
        for url in urls[:3]:
            await crawler.arun(url, REFRESH)
        await crawler.arun(urls[0], ENABLED)  # 300 bytes do not fit in 250: the oldest went
        assert len(f.requests) == 4
        await crawler.arun(urls[2], ENABLED)
        assert len(f.requests) == 4
    big = MockFetcher(lambda request: MockResponse(200, body * 3, content_type="text/html"))
    async with Crawler(fetcher=big, cache_max_bytes=250) as crawler:
        await crawler.arun(urls[0], REFRESH)
        await crawler.arun(urls[0], ENABLED)  # a page over the whole budget is not kept
        assert len(big.requests) == 2
    with pytest.raises(ConfigurationError, match="cache_max_entries"):
        Crawler(fetcher=link_fetcher(), cache_max_entries=0)
    with pytest.raises(ConfigurationError, match="cache_max_bytes"):
        Crawler(fetcher=link_fetcher(), cache_max_bytes=-1)


async def test_requests_keep_their_own_headers_over_the_run_config() -> None:
    f = link_fetcher()
    async with Crawler(fetcher=f) as crawler:
        results = await crawler.arun_many(
            [Request("http://site.example/", headers={"X-A": "mine"})],
            config=CrawlerRunConfig(headers={"X-A": "run", "X-B": "run"}),
        )
    assert results[0].request is not None and results[0].request.headers == {"X-A": "mine", "X-B": "run"}


async def test_bad_input_is_refused_clearly() -> None:
    async with Crawler(fetcher=link_fetcher()) as crawler:
        with pytest.raises(ConfigurationError, match="arun_many takes a list"):
            await crawler.arun_many("http://site.example/")  # type: ignore[call-overload]
        with pytest.raises(ConfigurationError, match="max_pages"):
            await crawler.crawl(["http://site.example/"], max_pages=0, max_depth=1)
        results = await crawler.arun_many([42, "http://site.example/"])  # type: ignore[list-item]
        assert [r.success for r in results] == [False, True] and results[0].error_type == "InvalidURLError"
    with pytest.raises(ConfigurationError, match="cache_mode"):
        CrawlerRunConfig(cache_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not both"):
        Crawler(fetcher=link_fetcher(), allow_private_addresses=True)


async def test_a_fetcher_without_a_send_gate_is_refused_clearly() -> None:
    class NoGate:
        limits = FetchLimits()

    with pytest.raises(ConfigurationError, match="send_gate"):
        Crawler(fetcher=NoGate())  # type: ignore[arg-type]


async def test_the_crawler_sets_its_gate_on_the_fetcher_and_spaces_sends_by_the_crawl_delay() -> None:
    clock = FakeClock()
    f = link_fetcher()
    crawler = Crawler(fetcher=f, clock=clock)
    gate: HostGate = crawler.gate
    assert f.send_gate == gate
    gate.hold(2.0)
    first = gate("site.example")
    assert first is not None
    await first  # the first send claims the host's slot at once ...
    second = gate("site.example")
    assert second is not None
    waiting = asyncio.ensure_future(second)
    await asyncio.sleep(0)
    assert not waiting.done()  # ... the next waits out the delay on the clock
    clock.advance(2.0)
    await waiting
    gate.release(2.0)
    assert gate("site.example") is None


async def test_arun_many_fetches_a_url_once_however_it_is_spelled_and_answers_every_spelling() -> None:
    f = link_fetcher()
    urls = ["http://site.example/a?y=2&x=1", "bad url", "HTTP://Site.Example:80/a?x=1&y=2#top", "http://site.example/b"]
    async with Crawler(fetcher=f) as crawler:
        results = await crawler.arun_many(urls, config=CrawlerRunConfig(headers={"X-Run": "1"}))
    assert sorted(r.url for r in results) == sorted(urls)
    assert [r.url for r in f.requests] == ["http://site.example/a?y=2&x=1", "http://site.example/b"]
    assert all(r.request is not None and r.request.headers == {"X-Run": "1"} for r in results if r.success)
    by_url = {r.url: r for r in results}
    assert by_url["bad url"].error_type == "InvalidURLError"
    twin = by_url["HTTP://Site.Example:80/a?x=1&y=2#top"]
    assert twin.success and twin.body == PAGE and twin.request is not None and twin.request.url == twin.url


async def test_a_subclass_that_overrides_fetch_alone_is_called_through_fetch() -> None:
    """HttpFetcher's fetch_result (the crawler's short path) must not bypass an overridden fetch."""
    from crawlherd.fetch.base import Response
    from crawlherd.fetch.http import HttpFetcher

    class Canned(HttpFetcher):
        async def fetch(self, request: Request) -> Response:
            return Response(request.url, 200, {"content-type": "text/plain"}, b"canned", request)

    async with Crawler(fetcher=Canned()) as crawler:
        result = await crawler.arun("http://site.example/")
    assert result.success and result.body == b"canned" and result.headers == {"content-type": "text/plain"}


class _EarlyClock(FakeClock):
    """A clock whose first sleep ends a millisecond early, as uvloop's timers do (whole milliseconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.early = True

    async def sleep(self, seconds: float) -> None:
        if self.early and seconds > 0.001:
            self.early = False
            self.advance(seconds - 0.001)
            return
        self.advance(seconds)


class _Slot:
    """A shared send clock that gives every send its slot 0.5 s from now."""

    async def stamp_send(self, host: str, owner: str) -> tuple[float, bool]:
        return 0.5, True

    def stamp_answer(self, host: str, owner: str) -> None:
        pass


async def test_a_shared_slot_is_kept_even_when_the_timer_fires_early() -> None:
    clock = _EarlyClock()
    gate = HostGate(clock=clock)
    gate.share(_Slot())
    start = clock.now()
    await pass_gate(gate, "polite.example")
    assert clock.now() - start >= 0.5  # never before the slot: a lower bound at the server
