"""The fleet's send clock on the real Redis (``send.lua``, ``answer.lua``): per host, when the next
request may leave, shared by every process -- from the last send, or its answer when later; never while
another process's request there is unanswered (for the delay plus ``SEND_HOLD`` at most) -- and crawls
sharing one Redis frontier that keep each host's delay at the server without a margin, even when one
of them is late between its slot and its write, and fetch each host's robots.txt once between them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from crawlherd import Crawler, CrawlerRunConfig
from crawlherd.clock import FakeClock
from crawlherd.fetch.gate import HostGate, pass_gate
from crawlherd.frontier import open_scheduler
from crawlherd.frontier.redis import RedisFrontier
from crawlherd.frontier.redis._fleet import SEND_HOLD
from tests.servers.timestamping import TimestampingServer
from tests.support.processes import wait_until

from .test_durable_frontier import delete_prefix

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

H = "polite.example"


async def open_redis(redis_url: str, prefix: str, **options: Any) -> RedisFrontier:
    frontier = open_scheduler(f"{redis_url}?prefix={prefix}", **options)
    assert isinstance(frontier, RedisFrontier)
    return await frontier.__aenter__()


async def answered(frontier: RedisFrontier, host: str, owner: str) -> None:
    """Report an answer and wait until it is recorded (it is recorded in the background)."""
    frontier.stamp_answer(host, owner)
    posts = set(frontier._send_clock._posts)
    if posts:
        await asyncio.wait_for(asyncio.gather(*posts), 10)


@pytest.fixture
async def two(redis_url: str, unique_name: str) -> Any:
    """Two frontier objects on one prefix (two processes), on one fake clock; H has a 1 s delay."""
    clock = FakeClock()
    one = await open_redis(redis_url, unique_name, clock=clock)
    other = await open_redis(redis_url, unique_name, clock=clock)
    await one.set_host_policy(H, delay=1.0)
    yield clock, one, other
    await one.close()
    await other.close()
    await delete_prefix(redis_url, unique_name)


GO = True  # stamp_send's second value: the slot is taken (else: ask again)


async def test_the_delay_runs_from_the_last_send_or_from_its_answer_when_later(two: Any) -> None:
    clock, one, other = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    assert await other.stamp_send(H, "b") == (pytest.approx(1.0), not GO)  # held: ask again after the delay
    clock.advance(0.3)
    await answered(one, H, "a")  # answered 0.3 s after it was sent: the delay runs from there
    clock.advance(0.7)
    assert await other.stamp_send(H, "b") == (pytest.approx(0.3), GO)  # its slot, 1 s after the answer
    assert await one.stamp_send(H, "a") == (pytest.approx(1.3), not GO)  # held by b's until its answer


async def test_a_request_of_one_process_waits_for_the_answer_of_its_other_one(two: Any) -> None:
    """Two page slots of one process (one gate, two tasks) to one host: the second asks for its slot only
    once the first is answered -- sent at their slots, the two could reach the server in either order
    -- and its slot is the delay after that answer."""
    clock, one, _ = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    second = asyncio.create_task(one.stamp_send(H, "a"))  # another task of the same process
    await asyncio.sleep(0.2)
    assert not second.done()  # held while the first is unanswered
    clock.advance(0.4)
    await answered(one, H, "a")
    assert await second == (pytest.approx(1.0), GO)  # the delay from the answer, not 0.6 s from the slot


async def test_a_stop_that_comes_as_the_first_answer_does_is_not_lost(two: Any) -> None:
    """A page slot cancelled (its crawl stopped) in the same turn of the loop as the answer it waited for
    comes: it is cancelled, not let through to send -- a cancellation lost there once left a worker's
    page loop running after its stop, and the stop waiting for it for ever."""
    clock, one, _ = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    second = asyncio.create_task(one.stamp_send(H, "a"))  # another task: held until the first's answer
    await asyncio.sleep(0.05)
    assert not second.done()
    one.stamp_answer(H, "a")  # the answer, and in the same turn the stop
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    await asyncio.wait_for(asyncio.gather(*one._send_clock._posts), 10)


async def test_an_answer_recorded_after_the_next_request_took_its_slot_leaves_that_ones_hold(two: Any) -> None:
    """The answer of one request and the slot of the same gate's next one go to Redis in two calls that
    race: recorded last, the answer ends the first request's hold only, so another process still waits
    for the second's answer (were it let go delay after the second's slot, the second being late to leave
    would bring the two closer than the delay at the server)."""
    clock, one, other = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    first_slot = one._send_clock._out[H, "a"][2]
    clock.advance(0.3)
    del one._send_clock._out[H, "a"]  # its answer came; recorded below, after the next request's slot
    assert await one.stamp_send(H, "a") == (pytest.approx(1.0), GO)  # the delay from now (its answer)
    await one._send_clock._answers((H, "a", "answer", repr(clock.now()), first_slot))
    wait, go = await other.stamp_send(H, "b")
    assert not go and wait == pytest.approx(2.0)  # held by the second request until its answer
    clock.advance(1.2)  # the second leaves at its slot (1.3) and is answered at 1.5
    await answered(one, H, "a")
    assert await other.stamp_send(H, "b") == (pytest.approx(1.0), GO)


async def test_an_unanswered_request_holds_other_processes_until_its_answer(two: Any) -> None:
    clock, one, other = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    clock.advance(1.5)  # a slow answer: past the delay, the host is still held for it
    wait, go = await other.stamp_send(H, "b")
    assert 0 < wait < 0.1 and not go  # asks again soon
    await answered(one, H, "a")
    assert await other.stamp_send(H, "b") == (pytest.approx(1.0), GO)  # the delay from the answer


async def test_an_answer_that_never_comes_holds_the_host_for_the_delay_plus_the_hold_at_most(
    two: Any, redis_url: str, unique_name: str
) -> None:
    """A request cancelled after its slot, a process gone: its hold ends by itself; nothing piles up."""
    clock, one, other = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    clock.advance(1.0 + SEND_HOLD - 0.01)
    wait, go = await other.stamp_send(H, "b")
    assert 0 < wait <= 0.01 + 1e-9 and not go
    clock.advance(0.01)
    assert await other.stamp_send(H, "b") == (0.0, GO)
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.hkeys(f"{unique_name}:out:{H}") == [b"b"]  # a's hold was dropped
        assert 0 < await client.pttl(f"{unique_name}:out:{H}") <= 1000 * (1.0 + SEND_HOLD) + 1000
        assert 0 < await client.pttl(f"{unique_name}:sent:{H}") <= 1000 * (1.0 + SEND_HOLD) + 1000
    finally:
        await client.aclose()


class SleepNoted(FakeClock):
    """A fake clock that says when something sleeps on it."""

    def __init__(self) -> None:
        super().__init__()
        self.slept = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.slept.set()
        await super().sleep(seconds)


async def test_a_send_cancelled_while_it_waits_for_its_slot_holds_the_host_no_longer(two: Any) -> None:
    """A crawl stopped while a request waits for its slot: the slot stays taken, but other processes are
    not held waiting for an answer that will never come."""
    _, one, other = two
    clock = SleepNoted()
    gate = HostGate(clock=clock)
    gate.share(one)
    await pass_gate(gate, H)  # sent and answered
    gate.answered(H)
    await asyncio.wait_for(asyncio.gather(*one._send_clock._posts), 10)
    waiting = asyncio.ensure_future(pass_gate(gate, H))  # its slot is 1 s away
    await asyncio.wait_for(clock.slept.wait(), 10)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(asyncio.gather(*one._send_clock._posts), 10)
    assert await other.stamp_send(H, "b") == (pytest.approx(2.0), GO)  # after the slot, not held by it


async def test_a_gates_own_unanswered_request_is_taken_as_answered_when_it_asks_again(two: Any) -> None:
    """The next hop of a redirect, a page after the robots.txt it needed: they follow the answer of the
    gate's previous request, which is not reported (one answer per fetch): the delay runs from the ask."""
    clock, one, _ = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    clock.advance(0.5)
    assert await one.stamp_send(H, "a") == (pytest.approx(1.0), GO)


async def test_a_host_without_a_delay_is_never_held_nor_stored_but_a_retry_after_holds_it(
    two: Any, redis_url: str, unique_name: str
) -> None:
    clock, one, other = two
    for _ in range(3):
        assert await one.stamp_send("free.example", "a") == (0.0, GO)
    await answered(one, "free.example", "a")  # nothing stamped: nothing to record
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert not await client.keys(f"{unique_name}:*:free.example")
    finally:
        await client.aclose()
    await other.block_host("free.example", clock.now() + 3.0)  # a Retry-After seen by the other one
    assert await one.stamp_send("free.example", "a") == (pytest.approx(3.0), not GO)
    clock.advance(3.0)
    assert await one.stamp_send("free.example", "a") == (0.0, GO)


async def test_sends_asked_at_once_share_a_round_trip_and_wait_for_the_first_ones_answer(two: Any) -> None:
    """Many sends asked at once (a page loop's slots) go to Redis together, and each is answered as if
    asked alone in turn: of four sends to a host with a delay the first takes its slot and the others
    ask again after it -- not the next three slots, which would go on the first's slot while it may not
    have left yet; every send to a host without a delay leaves at once."""
    clock, one, _ = two
    hosts = [H, "free.example"] * 4
    slots = await asyncio.gather(*(one.stamp_send(h, "a") for h in hosts))
    polite = [s for h, s in zip(hosts, slots, strict=True) if h == H]
    assert sorted(polite) == [(0.0, GO)] + [(pytest.approx(1.0), not GO)] * 3
    assert [s for h, s in zip(hosts, slots, strict=True) if h == "free.example"] == [(0.0, GO)] * 4
    assert one._send_clock.sends.calls == 8 and one._send_clock.sends.batches < 8  # shared round trips
    clock.advance(0.25)
    await answered(one, H, "a")
    assert await one.stamp_send(H, "a") == (pytest.approx(1.0), GO)  # the delay from the first's answer


async def test_a_gates_request_asked_before_its_previous_ones_slot_came_waits_for_that_ones_answer(
    two: Any,
) -> None:
    """A second page slot of a process that asks for its slot while the first's reply is on its way back
    (so the process's own hold cannot see the first yet): it is held like another process's request
    until the first -- which has not even left -- is answered, then goes the delay after that answer.
    Given the slot after the first's slot instead, the two reached a site 3 ms closer than its delay
    when the first went through a slower proxy."""
    clock, one, _ = two
    assert await one.stamp_send(H, "a") == (0.0, GO)
    clock.advance(0.3)
    await answered(one, H, "a")
    assert await one.stamp_send(H, "a") == (pytest.approx(1.0), GO)  # the first: its slot at 1.3
    slot = one._send_clock._out.pop((H, "a"))[2]  # as if its reply had not come back when the second asked
    clock.advance(0.1)
    wait, go = await one.stamp_send(H, "a")  # the second, at 0.4
    assert not go and wait == pytest.approx(1.9)  # ask again at 2.3, the first's slot + the delay
    clock.advance(1.1)  # the first leaves at 1.3 and is answered at 1.5
    await one._send_clock._answers((H, "a", "answer", repr(clock.now()), slot))
    assert await one.stamp_send(H, "a") == (pytest.approx(1.0), GO)  # 1 s after the answer, at 2.5


DELAY = 0.2
LAG = 0.15  # one crawler's time between passing its gate and writing its request


def lagging(gate: HostGate) -> Any:
    """A send gate that is late by LAG after the crawler's gate lets a request go (a busy process)."""

    async def late(host: str) -> None:
        await pass_gate(gate, host)
        await asyncio.sleep(LAG)

    def send_gate(host: str) -> Awaitable[None]:
        return late(host)

    return send_gate


async def test_crawls_sharing_a_redis_frontier_keep_the_delay_at_the_server(redis_url: str, unique_name: str) -> None:
    """Three crawlers (three processes' worth: each its own frontier object and send gate, one page at a
    time) crawl three hosts together through one Redis frontier; one of them writes each request LAG
    after its gate let it go. The server (kernel receive times) never sees two requests to a host closer
    than the delay: the others wait for the late one's answer. (Spaced from the stamps alone, a request
    sent at the stamp's delay reaches the server up to LAG too early after the late one's: min gaps of
    2-100 ms were seen that way.)"""
    frontier = f"{redis_url}?prefix={unique_name}"
    sent_by: dict[str, int] = {}
    with TimestampingServer(ports=3, pages=8) as server:
        seeds = [f"{url}/page/1" for url in server.urls]

        async def crawl(n: int) -> None:
            async with Crawler(allow_private_addresses=True, config=CrawlerRunConfig(concurrency=1)) as crawler:
                if n == 0:
                    crawler.fetcher.send_gate = lagging(crawler.gate)
                results = await crawler.crawl(
                    seeds, max_pages=100, max_depth=10, delay=DELAY, frontier=frontier, stream=False
                )
                assert crawler.gate.shared is None  # shared for the crawl's time only
                sent_by.update((r.url, n) for r in results if r.success)

        await asyncio.gather(*(crawl(n) for n in range(3)))
        stamps = list(server.stamps)
    await delete_prefix(redis_url, unique_name)
    assert sorted(s.path for s in stamps) == sorted(f"/page/{n}" for n in range(1, 8) for _ in server.ports)
    after_late = 0
    for port in server.ports:
        seen = sorted((s.at, sent_by[f"http://127.0.0.1:{port}{s.path}"]) for s in stamps if s.port == port)
        gaps = [b - a for (a, _), (b, _) in zip(seen, seen[1:], strict=False)]
        assert min(gaps) >= DELAY, (port, [round(g, 3) for g in gaps])
        after_late += sum(1 for (_, a), (_, b) in zip(seen, seen[1:], strict=False) if a == 0 and b != 0)
    assert after_late  # what is tested happened: another crawler's request right after a late one's


async def test_crawls_sharing_a_redis_frontier_fetch_each_robots_txt_once(redis_url: str, unique_name: str) -> None:
    """Three crawlers obeying robots.txt on one Redis frontier: a host's robots.txt is fetched by the one
    that takes its robots work, first; the others read it from the frontier's Redis (each would fetch it
    again before its first page of the host, costing the host a delay)."""
    frontier = f"{redis_url}?prefix={unique_name}"
    config = CrawlerRunConfig(concurrency=1, check_robots_txt=True)
    with TimestampingServer(ports=3, pages=8, robots_txt="User-agent: *\nDisallow: /private\n") as server:
        seeds = [f"{url}/page/1" for url in server.urls]

        async def crawl() -> int:
            async with Crawler(allow_private_addresses=True, config=config) as crawler:
                results = await crawler.crawl(
                    seeds, max_pages=100, max_depth=10, delay=DELAY, frontier=frontier, stream=False
                )
                return sum(r.success for r in results)

        fetched = await asyncio.gather(*(crawl() for _ in range(3)))
        stamps = sorted(server.stamps, key=lambda s: s.at)
    await delete_prefix(redis_url, unique_name)
    assert sum(fetched) == 21 and sum(1 for n in fetched if n) >= 2  # the pages shared out
    for port in server.ports:
        paths = [s.path for s in stamps if s.port == port]
        assert paths[0] == "/robots.txt" and paths.count("/robots.txt") == 1, (port, paths)


async def test_processes_asking_for_one_robots_txt_at_once_fetch_it_once(
    redis_url: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two robots caches (two processes) on one Redis frontier ask for a host's robots.txt at the same
    moment: the first claims the fetch, the other waits for what it shares. When the claimant's fetch
    reads nothing to share (a 5xx), it gives the claim back and the other fetches for itself at once --
    here, where a claim would otherwise hold it for an hour, before the test's timeout."""
    from crawlherd.fetch import robots as robots_module
    from tests.unit.test_robots import RobotsFetcher

    monkeypatch.setattr(robots_module, "CLAIM_SECONDS", 3600.0)
    frontier = await open_redis(redis_url, unique_name)
    client = aioredis.Redis.from_url(redis_url)

    def claimed(origin: str) -> Callable[[], Awaitable[bool]]:
        async def held() -> bool:  # the first cache holds the claim (and waits for its answer)
            return bool(await client.exists(f"{unique_name}:robots:{origin}:claim"))
        return held

    try:
        fetchers = [RobotsFetcher(200, "User-agent: *\nDisallow: /private\n") for _ in range(2)]
        caches = [robots_module.RobotsCache(f) for f in fetchers]
        for cache in caches:
            cache.share(frontier)
        for origin, status in (("http://a.test", 200), ("http://b.test", 503)):
            for f in fetchers:
                f.status = status
            fetchers[0].gate = gate = asyncio.Event()  # the first holds its answer
            first = asyncio.ensure_future(caches[0].load(f"{origin}/x"))
            await wait_until(claimed(origin), every=0.01, deadline=10)
            second = asyncio.ensure_future(caches[1].load(f"{origin}/y"))
            await asyncio.sleep(0.2)
            assert not second.done()  # waiting for the first's robots.txt, not fetching it
            gate.set()
            assert (await first)[0] == (await second)[0] == status
        # a.test: fetched once, by the first; b.test (503, not shared): the claim given back, fetched by both
        assert [f.calls for f in fetchers] == [["http://a.test/robots.txt", "http://b.test/robots.txt"],
                                               ["http://b.test/robots.txt"]]
        assert await caches[1].allowed("http://a.test/y") and not await caches[1].allowed("http://a.test/private")
        assert not await client.exists(f"{unique_name}:robots:http://b.test:claim")
    finally:
        await client.aclose()
        await frontier.close()
        await delete_prefix(redis_url, unique_name)
