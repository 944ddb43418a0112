"""The Crawler end to end against the misbehaving local server: one result per URL whatever happens,
re-fetches after 429/503, politeness measured on the server's own timestamps, streams that cancel."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from crawlherd import Crawler, CrawlerMonitor, CrawlerRunConfig, RateLimiter, SemaphoreDispatcher
from crawlherd.fetch import MockFetcher, MockResponse
from tests.servers.misbehaving import Hit, MisbehavingServer
from tests.servers.timestamping import Stamp, TimestampingServer

# Spacing is asserted on the kernel's receive timestamps (TimestampingServer). Two requests written
# exactly d apart can still arrive a hair closer when the first one spent longer between the write and
# the wire; 2 ms covers that on loopback. A politeness bug shows gaps near 0, far below this.
NETWORK_SLACK = 0.002


@pytest.fixture
async def server() -> AsyncIterator[MisbehavingServer]:
    async with MisbehavingServer(robots_txt="User-agent: *\nDisallow: /page/3\nCrawl-delay: 0.3\n") as s:
        yield s


@pytest.fixture
async def crawler() -> AsyncIterator[Crawler]:
    async with Crawler(allow_private_addresses=True) as c:
        yield c
    assert not c._streams


def gaps(hits: list[Hit] | list[Stamp]) -> list[float]:
    times = sorted(h.at for h in hits)
    return [b - a for a, b in itertools.pairwise(times)]


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (the server lives on this loop)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def fast_limiter(**kw: object) -> RateLimiter:
    return RateLimiter(base_delay=(0.0, 0.0), backoff_base=0.05, **kw)  # type: ignore[arg-type]


async def test_arun_one_page_and_one_bad_url(server: MisbehavingServer, crawler: Crawler) -> None:
    r = await crawler.arun(server.url + "/page/1")
    assert r.success and r.status_code == 200 and "page 1" in r.text and r.final_url == server.url + "/page/1"
    bad = await crawler.arun("ftp://nope")
    assert not bad.success and bad.error_type == "InvalidURLError" and bad.status_code is None


async def test_every_url_yields_exactly_one_result_and_none_aborts_the_batch(
    server: MisbehavingServer, crawler: Crawler
) -> None:
    u = server.url
    urls = [
        f"{u}/page/1", f"{u}/page/2", "not a url", f"{u}/always/404", f"{u}/binary", f"{u}/reset",
        f"{u}/redirect/loop", "http://127.0.0.1:1/refused", f"{u}/page/1", f"{u}/gzip",
    ]
    results = await crawler.arun_many(urls, dispatcher=SemaphoreDispatcher(4))
    assert sorted(r.url for r in results) == sorted(urls)
    by_url = {r.url: r for r in results}
    assert by_url[f"{u}/page/2"].success
    assert by_url["not a url"].error_type == "InvalidURLError"
    assert by_url[f"{u}/always/404"].status_code == 404 and not by_url[f"{u}/always/404"].success
    assert by_url[f"{u}/binary"].error_type == "ContentTypeError"
    assert by_url[f"{u}/reset"].error_type == "FetchError"
    assert by_url[f"{u}/redirect/loop"].error_type == "TooManyRedirectsError"
    assert by_url["http://127.0.0.1:1/refused"].error_type == "FetchError"
    # The repeated URL was fetched once and answered twice.
    assert [r.url for r in results].count(f"{u}/page/1") == 2
    assert len(server.hits_for("/page/1")) == 1


async def test_stream_yields_in_completion_order(server: MisbehavingServer, crawler: Crawler) -> None:
    urls = [f"{server.url}/slow?interval=0.05&count=6", f"{server.url}/page/1"]
    stream = await crawler.arun_many(urls, config=CrawlerRunConfig(stream=True))
    async with stream:
        got = [r.url async for r in stream]
    assert got == [urls[1], urls[0]]


def client_tasks() -> set[asyncio.Task[object]]:
    """The running tasks but the test server's request handlers (those of connections the crawler
    dropped end a turn or two after it: the server's, not a leak of the crawler's)."""
    return {t for t in asyncio.all_tasks()
            if not getattr(t.get_coro(), "__qualname__", "").startswith("RequestHandler.")}


async def test_closing_the_stream_early_cancels_work_in_flight_and_leaks_nothing(
    server: MisbehavingServer, crawler: Crawler
) -> None:
    before = client_tasks()
    urls = [f"{server.url}/page/1"] + [f"{server.url}/stall?seconds=30&n={i}" for i in range(6)]
    stream = await crawler.arun_many(urls, dispatcher=SemaphoreDispatcher(4), stream=True)
    first = await anext(stream)
    assert first.url.endswith("/page/1")
    await until(lambda: len(server.hits_for("/stall")) >= 4)
    await stream.aclose()
    assert client_tasks() == before
    assert not crawler._streams
    # The four stalled requests were abandoned, the two queued ones never sent.
    await asyncio.sleep(0.05)
    assert len(server.hits_for("/stall")) == 4


async def test_leaving_the_crawler_closes_open_streams(server: MisbehavingServer) -> None:
    before = client_tasks()
    async with Crawler(allow_private_addresses=True) as c:
        stream = await c.arun_many([f"{server.url}/stall?seconds=30"], stream=True)
        task = asyncio.create_task(anext(stream))
        await until(lambda: bool(server.hits_for("/stall")))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert client_tasks() == before


async def test_429_is_refetched_after_retry_after_seconds(server: MisbehavingServer, crawler: Crawler) -> None:
    url = f"{server.url}/ratelimit/a?times=2&after=1"
    monitor = CrawlerMonitor(enable_ui=False)
    results = await crawler.arun_many(
        [url], dispatcher=SemaphoreDispatcher(2, rate_limiter=fast_limiter(), monitor=monitor)
    )
    (r,) = results
    assert r.success and "after 2 refusals" in r.text
    assert r.dispatch is not None and r.dispatch.retries == 2
    hits = server.hits_for("/ratelimit/a")
    assert len(hits) == 3
    assert min(gaps(hits)) >= 1.0 - NETWORK_SLACK
    assert monitor.get_statistics()["retried"] == 2


async def test_retry_after_http_date_is_honoured(server: MisbehavingServer, crawler: Crawler) -> None:
    url = f"{server.url}/ratelimit/d?times=1&after=date2"
    (r,) = await crawler.arun_many([url], dispatcher=SemaphoreDispatcher(1, rate_limiter=fast_limiter()))
    assert r.success
    # The date has one-second resolution: "now + 2 s" truncated is at least 1 s away.
    assert min(gaps(server.hits_for("/ratelimit/d"))) >= 1.0 - NETWORK_SLACK


async def test_503_backs_off_then_fails_with_the_reason_after_max_retries(
    server: MisbehavingServer, crawler: Crawler
) -> None:
    url = f"{server.url}/always/503"
    (r,) = await crawler.arun_many([url], dispatcher=SemaphoreDispatcher(1, rate_limiter=fast_limiter(max_retries=2)))
    assert not r.success and r.status_code == 503
    assert r.error_type == "RateLimitedError" and "still rate limited after 2 re-fetches" in (r.error_message or "")
    hits = server.hits_for("/always/503")
    assert len(hits) == 3
    g = gaps(hits)
    assert g[1] > g[0] * 1.2  # exponential: the second wait is longer than the first


@pytest.fixture
def stamping() -> Iterator[TimestampingServer]:
    with TimestampingServer(ports=10, pages=6, robots_txt="User-agent: *\nDisallow: /page/3\nCrawl-delay: 0.3\n") as s:
        yield s


async def test_rate_limiter_spaces_many_waiters_on_one_domain(stamping: TimestampingServer, crawler: Crawler) -> None:
    urls = [f"{stamping.urls[0]}/page/{i}" for i in range(8)]
    rl = RateLimiter(base_delay=(0.1, 0.1), max_delay=5)
    results = await crawler.arun_many(urls, dispatcher=SemaphoreDispatcher(8, rate_limiter=rl))
    assert all(r.success for r in results)
    g = gaps([h for h in stamping.stamps if h.path.startswith("/page/")])
    assert len(g) == 7 and min(g) >= 0.1 - NETWORK_SLACK  # eight tasks waiting, no burst


async def test_politeness_ten_hosts_delay_measured_by_the_server(stamping: TimestampingServer) -> None:
    delay = 0.15
    async with Crawler(allow_private_addresses=True) as crawler:
        seeds = [f"{base}/page/1" for base in stamping.urls]
        results = await crawler.crawl(
            seeds, max_pages=50, max_depth=5, delay=delay, max_in_flight_per_host=2,
            config=CrawlerRunConfig(concurrency=20), stream=False,
        )
        assert len(results) == 50 and all(r.success for r in results)
        per_port: dict[int, list[Stamp]] = defaultdict(list)
        for stamp in stamping.stamps:
            per_port[stamp.port].append(stamp)
        assert len(per_port) == 10
        for hits in per_port.values():
            assert len(hits) == 5
            assert min(gaps(hits)) >= delay - NETWORK_SLACK


async def test_crawl_follows_links_dedups_and_goes_by_depth(server: MisbehavingServer, crawler: Crawler) -> None:
    results = await crawler.crawl(
        [server.url + "/page/1", server.url + "/page/1"], max_pages=15, max_depth=3, delay=0,
        config=CrawlerRunConfig(concurrency=1), stream=False,
    )
    urls = [r.url for r in results]
    assert len(urls) == 15 and len(set(urls)) == 15  # the seed twice and every "home" link: fetched once
    assert [r.depth for r in results] == sorted(r.depth for r in results)  # shallower first
    assert max(r.depth for r in results) == 3
    assert all("#" not in u for u in urls)


async def test_crawl_max_depth_zero_fetches_only_the_seeds(server: MisbehavingServer, crawler: Crawler) -> None:
    results = await crawler.crawl([server.url + "/page/1"], max_pages=10, max_depth=0, delay=0, stream=False)
    assert [r.url for r in results] == [server.url + "/page/1"]
    assert results[0].links  # links were seen, not followed


async def test_crawl_stays_within_allowed_domains(server: MisbehavingServer, crawler: Crawler) -> None:
    page = f"{server.url}/redirect/to?url=http://localhost:{server.ports[0]}/page/1"
    results = await crawler.crawl([page], max_pages=10, max_depth=3, delay=0, stream=False)
    # The redirect lands on "localhost": its links are outside the seed's host and are not followed.
    assert len(results) == 1 and results[0].final_url.startswith("http://localhost")  # type: ignore[union-attr]


async def test_robots_disallow_and_crawl_delay_reach_the_frontier(
    stamping: TimestampingServer, crawler: Crawler
) -> None:
    base = stamping.urls[0]
    results = await crawler.crawl(
        [base + "/page/1"], max_pages=5, max_depth=3, delay=0,
        config=CrawlerRunConfig(check_robots_txt=True, concurrency=4), stream=False,
    )
    by_url = {r.url: r for r in results}
    assert len(results) == 5
    blocked = by_url[base + "/page/3"]
    assert not blocked.success and blocked.error_type == "RobotsDisallowedError"
    paths = [h.path for h in stamping.stamps]
    assert "/page/3" not in paths
    assert paths.count("/robots.txt") == 1  # cached per host
    pages = [h for h in stamping.stamps if h.path.startswith("/page/")]
    assert len(pages) == 4
    assert min(gaps(pages)) >= 0.3 - NETWORK_SLACK  # Crawl-delay 0.3 became the host's delay


async def test_cache_mode_enabled_answers_from_memory(server: MisbehavingServer, crawler: Crawler) -> None:
    cfg = CrawlerRunConfig(cache_mode="enabled")
    first = await crawler.arun(server.url + "/page/1", cfg)
    again = await crawler.arun(server.url + "/page/1", cfg)
    assert first.success and again.success and again.body == first.body
    assert len(server.hits_for("/page/1")) == 1
    await crawler.arun(server.url + "/page/1")  # bypass: fetched again
    assert len(server.hits_for("/page/1")) == 2


async def test_run_config_headers_reach_the_server(server: MisbehavingServer, crawler: Crawler) -> None:
    seen: list[str] = []

    async def spy(url: str) -> None:
        seen.append(url)

    r = await crawler.arun(server.url + "/page/1", CrawlerRunConfig(headers={"X-Test": "1"}, total_timeout=5))
    assert r.success and r.request is not None
    assert r.request.headers == {"X-Test": "1"}
    assert r.request.meta["crawlherd.timeouts"]["total"] == 5


async def test_crawler_takes_a_fetcher_instance() -> None:
    fetcher = MockFetcher(lambda request: MockResponse(200, "<a href='/x'>x</a>", content_type="text/html"))
    async with Crawler(fetcher=fetcher) as crawler:
        assert fetcher.entered
        results = await crawler.crawl(["http://site.example/"], max_pages=2, max_depth=1, delay=0, stream=False)
        assert sorted(r.url for r in results) == ["http://site.example/", "http://site.example/x"]
    assert fetcher.closed


async def test_a_stream_closed_before_iterating_releases_its_frontier(
    server: MisbehavingServer, crawler: Crawler
) -> None:
    stream = await crawler.crawl([server.url + "/page/1"], max_pages=5, max_depth=2, delay=0.5)
    assert crawler.gate.delay == 0.5
    frontier = stream._run.frontier
    await stream.aclose()
    assert frontier._closed  # type: ignore[attr-defined]
    assert crawler.gate.delay == 0.0 and not crawler.gate.delays
    assert server.hits == []


async def test_crawl_uses_a_frontier_it_is_given_and_leaves_it_open(
    server: MisbehavingServer, crawler: Crawler
) -> None:
    from crawlherd import open_scheduler

    async with open_scheduler("memory://", delay=0) as frontier:
        results = await crawler.crawl(
            [server.url + "/page/1"], max_pages=4, max_depth=2, frontier=frontier, stream=False
        )
        assert len(results) == 4
        stats = await frontier.stats()
        assert stats.acked == 4 and stats.queued == 0
        assert not frontier._closed  # type: ignore[attr-defined]


async def test_memory_adaptive_dispatcher_streams_through_the_crawler(
    server: MisbehavingServer, crawler: Crawler
) -> None:
    from crawlherd import MemoryAdaptiveDispatcher

    urls = [f"{server.url}/page/{i}" for i in range(10)] + [f"{server.url}/always/404"]
    dispatcher = MemoryAdaptiveDispatcher(max_session_permit=3, memory_reader=lambda: 40.0)
    stream = await crawler.arun_many(urls, dispatcher=dispatcher, stream=True)
    async with stream:
        results = [r async for r in stream]
    assert sorted(r.url for r in results) == sorted(urls)
    assert sum(r.success for r in results) == 10
    assert all(r.dispatch is not None and r.dispatch.memory_at_start > 0 for r in results)
