"""Issue 14, must-show 1: every code example of crawl4ai's dispatcher chapter and of Crawlo's scheduler
page runs with only its import line changed (the files are in ``tests/seeds/``), and does what the
document promises -- measured at a local server (``tests/servers/seedsite.py``) that stands in for
example.com and friends."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from types import ModuleType

import pytest

from crawlherd.crawler.concurrency.memory_usage import SystemMemory
from crawlherd.crawler.renderer import Renderer
from crawlherd.fetch.base import Fetcher
from crawlherd.fetch.gate import SendGate
from tests.servers.seedsite import SeedSite, routed_fetcher_class

pytestmark = pytest.mark.timeout(120)

EXAMPLES = ["example.com", "example.org", "example.net"]


def example(name: str) -> ModuleType:
    """A seed example, imported afresh (module-level code runs again)."""
    module = importlib.import_module(f"tests.seeds.{name}")
    return importlib.reload(module)


@pytest.fixture
def route(monkeypatch: pytest.MonkeyPatch) -> Callable[[SeedSite], None]:
    """Install a site's routing fetcher as the crawler's default HTTP fetcher: ``route(site)``."""

    def install(site: SeedSite) -> None:
        routed = routed_fetcher_class(site)
        monkeypatch.setattr("crawlherd.fetch.http.HttpFetcher", routed)

        async def routed_renderer(self: Renderer, gate: SendGate | None) -> Fetcher:
            # The requests the default crawler would render in Chromium (screenshot=True) reach the
            # routed site over HTTP too: Chromium cannot be pointed at an in-process https:// host. The
            # screenshots themselves are tested in Chromium in test_browser_pages.py.
            if self._fetcher is None:
                fetcher = routed(self.limits)
                fetcher.send_gate = gate
                await fetcher.__aenter__()
                self._fetcher = fetcher
            return self._fetcher

        monkeypatch.setattr(Renderer, "fetcher", routed_renderer)

    return install


class Readings:
    """An injected memory reading: ``values`` in turn, then the last one for ever; ``calls`` counts."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        value = self.values[min(self.calls, len(self.values)) - 1]
        return value


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch) -> Readings:
    """Every SystemMemory reading (the dispatcher's and the monitor's) comes from ``memory``."""
    readings = Readings(40.0)
    monkeypatch.setattr(SystemMemory, "__call__", lambda self: readings())
    return readings


# -- crawl4ai: "Let's see a simple example" -------------------------------------------------------------


async def test_crawl4ai_three_sites_three_at_a_time(route) -> None:
    async with SeedSite(EXAMPLES, barrier=3) as site:
        route(site)
        results = await example("crawl4ai_01_multiple_sites").crawl_multiple_sites()
    assert [r.url for r in results] and sorted(r.url for r in results) == sorted(f"https://{h}" for h in EXAMPLES)
    assert all(r.success and r.status_code == 200 for r in results)
    assert site.max_in_flight == 3  # "crawl three URLs at the same time, not one after another"


async def test_crawl4ai_semaphore_dispatcher_allows_five(route, memory) -> None:
    dispatcher = example("crawl4ai_02_semaphore").dispatcher
    from crawlherd import AsyncWebCrawler

    async with SeedSite(EXAMPLES, barrier=5) as site:
        route(site)
        urls = [f"https://{EXAMPLES[i % 3]}/p{i}" for i in range(15)]
        async with AsyncWebCrawler() as crawler:
            results = await crawler.arun_many(urls=urls, dispatcher=dispatcher)
    assert len(results) == 15 and all(r.success for r in results)
    assert site.max_in_flight == 5  # "allows 5 simultaneous crawls", no more, no less


async def test_crawl4ai_memory_adaptive_never_exceeds_twenty(route, memory) -> None:
    dispatcher = example("crawl4ai_03_memory_adaptive").dispatcher
    assert dispatcher.memory_threshold_percent == 90.0 and dispatcher.max_session_permit == 20
    from crawlherd import AsyncWebCrawler

    async with SeedSite(EXAMPLES, barrier=20) as site:
        route(site)
        urls = [f"https://{EXAMPLES[i % 3]}/p{i}" for i in range(40)]
        async with AsyncWebCrawler() as crawler:
            results = await crawler.arun_many(urls=urls, dispatcher=dispatcher)
    assert len(results) == 40 and all(r.success for r in results)
    assert site.max_in_flight == 20  # "Never exceed 20 simultaneous crawls"


async def test_crawl4ai_rate_limiter_spaces_and_retries_429(route, memory) -> None:
    module = example("crawl4ai_04_rate_limiter")
    rate_limiter, dispatcher = module.rate_limiter, module.dispatcher
    assert (rate_limiter.base_delay, rate_limiter.max_delay, rate_limiter.max_retries) == ((1.0, 3.0), 60.0, 3)
    assert dispatcher.rate_limiter is rate_limiter
    from crawlherd import AsyncWebCrawler

    async with SeedSite(["example.com"], rate_limited={"/busy": 2}, retry_after=1) as site:
        route(site)
        async with AsyncWebCrawler() as crawler:
            results = await crawler.arun_many(
                urls=["https://example.com/busy", "https://example.com/calm"], dispatcher=dispatcher
            )
    by_url = {r.url: r for r in results}
    busy = by_url["https://example.com/busy"]
    assert busy.success and busy.status_code == 200 and busy.dispatch is not None and busy.dispatch.retries == 2
    assert [h.status for h in site.hits_of(path="/busy")] == [429, 429, 200]  # backed off, then re-fetched
    assert by_url["https://example.com/calm"].success
    assert len(site.hits) == 4
    # "waits 1-3 seconds between requests": the spacing itself is the RateLimiter's unit tests' (on a
    # FakeClock); here, the limiter that spaced these sends is the example's, with its base delay
    assert 1.0 <= rate_limiter.delay_of("example.com") <= 60.0


async def test_crawl4ai_rate_limiter_gives_up_after_max_retries(route, memory) -> None:
    from crawlherd import AsyncWebCrawler, MemoryAdaptiveDispatcher, RateLimiter

    limiter = RateLimiter(base_delay=(0.0, 0.0), max_retries=1)
    async with SeedSite(["example.com"], rate_limited={"/busy": 5}, retry_after=1) as site:
        route(site)
        async with AsyncWebCrawler() as crawler:
            [result] = await crawler.arun_many(
                urls=["https://example.com/busy"], dispatcher=MemoryAdaptiveDispatcher(rate_limiter=limiter)
            )
    assert not result.success and result.status_code == 429
    assert result.error_message == "HTTP 429: still rate limited after 1 re-fetches, last Retry-After 1 s"
    assert len(site.hits_of(path="/busy")) == 2  # "Try a maximum of N times": the fetch and its one retry


async def test_crawl4ai_stream_in_completion_order(route, capsys: pytest.CaptureFixture[str]) -> None:
    # example.com is answered only once the other two were: streamed, it must come out last.
    async with SeedSite(EXAMPLES, after={"example.com": ["example.org", "example.net"]}) as site:
        route(site)
        await example("crawl4ai_05_stream").stream_results()
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted(f"Just finished: https://{h}" for h in EXAMPLES)
    assert lines[-1] == "Just finished: https://example.com"


async def test_crawl4ai_news_crawler(route, memory, caplog: pytest.LogCaptureFixture,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Memory starts above the example's 85 % threshold and falls to the derived recovery level (80):
    # nothing may be fetched before it did. /tech answers 429 once first: backed off, re-fetched.
    memory.values = [86.0, 86.0, 84.0, 80.0, 50.0]
    async with SeedSite(["example-news.com"], rate_limited={"/tech": 1}, retry_after=1,
                        on_hit=lambda: memory.calls) as site:
        route(site)
        with caplog.at_level(logging.WARNING, logger="crawlherd.crawler"):
            await example("crawl4ai_06_news").crawl_news_sites()
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == [
        "Successfully crawled: https://example-news.com/business",
        "Successfully crawled: https://example-news.com/tech",
    ]
    assert [h.status for h in site.hits_of(path="/tech")] == [429, 200]
    # readings 1-3 (86, 86, 84) hold the work; 84 is under the threshold but above recovery: still held
    assert min(h.note for h in site.hits) >= 4
    # screenshot=True on the default crawler goes to its renderer (here routed, see route()): no
    # warning that screenshots cannot be taken
    assert [r.getMessage() for r in caplog.records] == []


async def test_crawl4ai_monitor_statistics(route, memory, capsys: pytest.CaptureFixture[str]) -> None:
    async with SeedSite(EXAMPLES) as site:
        route(site)
        await example("crawl4ai_09_monitor").monitored_crawl()
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["Completed: 2 URLs", "Failed: 0 URLs"]
    prefix, _, rest = out[2].partition(": ")
    assert prefix == "Average memory usage" and rest.endswith(" MB")
    assert 1.0 < float(rest.removesuffix(" MB")) < 100_000  # this process's RSS, in MB (not bytes)
    assert len(site.hits) == 2


# -- crawl4ai: the "Implementation Details" excerpts ------------------------------------------------------


async def test_crawl4ai_custom_dispatcher_plugs_in(route) -> None:
    from crawlherd import AsyncWebCrawler, RateLimiter

    Custom = example("crawl4ai_08_custom_dispatcher").SemaphoreDispatcher
    limiter = RateLimiter(base_delay=(0.0, 0.0))
    calls: list[str] = []
    wait = limiter.wait_if_needed

    async def spy(url: str) -> None:
        calls.append(url)
        await wait(url)

    limiter.wait_if_needed = spy  # type: ignore[method-assign]
    dispatcher = Custom(semaphore_count=2, rate_limiter=limiter)
    async with SeedSite(EXAMPLES, barrier=2) as site:
        route(site)
        urls = [f"https://{EXAMPLES[i % 3]}/p{i}" for i in range(6)] + ["https://example.com/p0"]
        async with AsyncWebCrawler() as crawler:
            results = await crawler.arun_many(urls=urls, dispatcher=dispatcher)
            site.barrier = 0
            streamed = [r.url async for r in await crawler.arun_many(urls=urls[:3], dispatcher=dispatcher,
                                                                        stream=True)]
    assert sorted(r.url for r in results) == sorted(urls)  # one result per URL given, the repeat too
    assert all(r.success for r in results)
    assert dispatcher.crawler is not None
    assert site.max_in_flight == 2  # its own semaphore bounds the crawl
    assert sorted(calls) == sorted([*set(urls), *urls[:3]])  # it called wait_if_needed(url) itself
    assert sorted(streamed) == sorted(urls[:3])


async def test_crawl4ai_memory_monitor_rule_is_crawlherds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chapter's _memory_monitor_task excerpt and crawlherd's dispatcher, fed the same readings,
    agree on memory_pressure_mode after every reading (enter at >= threshold, leave at <= recovery)."""
    import asyncio
    import types

    import psutil

    from crawlherd import MemoryAdaptiveDispatcher

    module = example("crawl4ai_07_internals_memory_adaptive")
    theirs = module.MemoryAdaptiveDispatcher(memory_threshold_percent=85.0)
    assert (theirs.memory_threshold_percent, theirs.max_session_permit) == (85.0, 20)
    assert theirs.memory_pressure_mode is False
    readings = [50.0, 85.0, 84.0, 80.0, 79.0, 86.0, 81.0, 80.0, 90.0]
    # what the excerpt reads but never sets (crawl4ai sets them elsewhere)
    theirs.recovery_threshold_percent, theirs.check_interval = 80.0, 0
    seen: list[bool] = []
    feed = iter(readings)

    def virtual_memory() -> object:
        if "current_memory_percent" in theirs.__dict__:  # the mode the previous reading left
            seen.append(theirs.memory_pressure_mode)
        try:
            return types.SimpleNamespace(percent=next(feed))
        except StopIteration:
            raise asyncio.CancelledError from None

    monkeypatch.setattr(psutil, "virtual_memory", virtual_memory)
    with pytest.raises(asyncio.CancelledError):
        await module._memory_monitor_task(theirs)

    feed2 = iter(readings)
    ours = MemoryAdaptiveDispatcher(memory_threshold_percent=85.0, memory_reader=lambda: next(feed2))
    assert ours.recovery_threshold_percent == 80.0 and ours.current_memory_percent == 0.0
    mine = []
    for value in readings:
        ours.check_memory(0.0)
        assert ours.current_memory_percent == value
        mine.append(ours.memory_pressure_mode)
    assert mine == seen == [False, True, True, False, False, True, True, False, True]
