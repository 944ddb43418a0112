"""RobotsCache with a MockFetcher: RFC 9309 status handling, caching, single flight, Crawl-delay."""

from __future__ import annotations

import asyncio

import pytest

from crawlherd.clock import FakeClock
from crawlherd.errors import (
    ContentTypeError,
    FetchError,
    FetchTimeoutError,
    RobotsDisallowedError,
    RobotsUnavailableError,
)
from crawlherd.fetch import FetchLimits, MockFetcher, MockResponse
from crawlherd.fetch.robots import RobotsCache
from crawlherd.request import Request


class RobotsFetcher(MockFetcher):
    """A MockFetcher answering robots.txt with ``status`` and ``text`` (or raising ``error``); ``gate``,
    when set, holds every answer until it is set."""

    def __init__(self, status: int = 200, text: str = "", error: FetchError | None = None) -> None:
        super().__init__(self._answer, FetchLimits(user_agent="crawlherd-test"))
        self.status, self.text, self.error = status, text, error
        self.gate: asyncio.Event | None = None

    async def _answer(self, request: Request) -> MockResponse:
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return MockResponse(self.status, self.text, content_type="text/plain")

    @property
    def calls(self) -> list[str]:
        return self.urls


ROBOTS = "User-agent: *\nDisallow: /private\nCrawl-delay: 4\n\nUser-agent: other\nDisallow: /\n"


async def test_rules_apply_and_are_cached_per_host() -> None:
    clock = FakeClock()
    f = RobotsFetcher(text=ROBOTS)
    robots = RobotsCache(f, clock=clock, ttl=100)
    assert await robots.allowed("http://a.example/page")
    assert not await robots.allowed("http://a.example/private/x")
    assert robots.crawl_delay("http://a.example/") == 4.0
    assert f.calls == ["http://a.example/robots.txt"]
    assert await robots.allowed("http://b.example:8080/page")
    assert f.calls[-1] == "http://b.example:8080/robots.txt"
    clock.advance(101)
    await robots.allowed("http://a.example/page")
    assert len(f.calls) == 3  # expired: fetched again


@pytest.mark.parametrize(
    ("status", "error", "allowed"),
    [
        (404, None, True),  # no robots.txt: everything allowed
        (403, None, True),
        (503, None, False),  # server trouble: nothing allowed for now
        (200, FetchError("reset"), False),  # unreachable
        (200, ContentTypeError("image/png"), True),  # not a robots.txt we can read
    ],
)
async def test_status_handling(status: int, error: FetchError | None, allowed: bool) -> None:
    robots = RobotsCache(RobotsFetcher(status=status, text=ROBOTS, error=error), clock=FakeClock())
    assert await robots.allowed("http://a.example/page") is allowed


async def test_one_fetch_for_many_concurrent_callers() -> None:
    f = RobotsFetcher(text=ROBOTS)
    f.gate = asyncio.Event()
    robots = RobotsCache(f, clock=FakeClock())
    tasks = [asyncio.create_task(robots.allowed(f"http://a.example/{i}")) for i in range(20)]
    await asyncio.sleep(0)
    f.gate.set()
    assert all(await asyncio.gather(*tasks))
    assert len(f.calls) == 1


async def test_crawl_delay_is_handed_over_once_per_host() -> None:
    seen: list[tuple[str, float]] = []

    async def hook(host: str, delay: float) -> None:
        seen.append((host, delay))

    robots = RobotsCache(RobotsFetcher(text=ROBOTS), clock=FakeClock(), on_crawl_delay=hook)
    await robots.allowed("http://a.example/1")
    await robots.allowed("http://a.example/2")
    assert seen == [("a.example", 4.0)]


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [
        (200, FetchError("http://a.example/robots.txt: DNS lookup failed for a.example (Name or service not known)"),
         "http://a.example/page: not fetched: http://a.example/robots.txt could not be read: "
         "DNS lookup failed for a.example (Name or service not known)"),
        (200, FetchError("http://a.example/robots.txt: connection refused by a.example:80"),
         "http://a.example/page: not fetched: http://a.example/robots.txt could not be read: "
         "connection refused by a.example:80"),
        (200, FetchTimeoutError("http://a.example/robots.txt: connect timeout (5 s)"),
         "http://a.example/page: not fetched: http://a.example/robots.txt could not be read: connect timeout (5 s)"),
        (503, None, "http://a.example/page: not fetched: http://a.example/robots.txt could not be read: HTTP 503"),
    ],
)
async def test_check_says_why_robots_txt_could_not_be_read(
    status: int, error: FetchError | None, message: str
) -> None:
    robots = RobotsCache(RobotsFetcher(status=status, text=ROBOTS, error=error), clock=FakeClock())
    with pytest.raises(RobotsUnavailableError) as info:
        await robots.check("http://a.example/page")
    assert str(info.value) == message
    assert info.value.cause is error
    assert not isinstance(info.value, RobotsDisallowedError)  # the worker retries it; a disallow is final


async def test_check_says_disallowed_only_when_the_rules_say_so() -> None:
    robots = RobotsCache(RobotsFetcher(text=ROBOTS), clock=FakeClock())
    await robots.check("http://a.example/page")
    with pytest.raises(RobotsDisallowedError, match=r"^http://a.example/private: disallowed by robots.txt$"):
        await robots.check("http://a.example/private")


async def test_a_link_found_allowed_is_not_asked_of_the_rules_again_at_its_fetch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    robots = RobotsCache(RobotsFetcher(text=ROBOTS), clock=clock, ttl=100)
    await robots.check("http://a.example/")
    asked: list[str] = []
    parser = robots._entries["http://a.example"].parser  # noqa: SLF001
    assert parser is not None
    can_fetch = parser.can_fetch
    monkeypatch.setattr(parser, "can_fetch", lambda url, agent: asked.append(url) or can_fetch(url, agent))
    assert robots.known_disallowed("http://a.example/page") is None
    await robots.check("http://a.example/page")  # the link's fetch: the answer kept
    assert asked == ["http://a.example/page"]
    assert robots.known_disallowed("http://a.example/private") is not None
    with pytest.raises(RobotsDisallowedError):
        await robots.check("http://a.example/private")
    assert robots.known_disallowed("http://a.example/page") is None
    clock.advance(101)  # robots.txt read again: its rules, not the answer kept
    await robots.check("http://a.example/page")
    assert "http://a.example/private" not in robots._allowed  # noqa: SLF001
