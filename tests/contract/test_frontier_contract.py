"""The frontier contract: the same assertions for every backend (see conftest.BACKENDS)."""

from __future__ import annotations

import asyncio

import pytest

from crawlherd import FakeClock, Request
from crawlherd.errors import LeaseError, QueueFullError
from crawlherd.frontier import Frontier, Lease
from crawlherd.frontier.base import enqueue_each

from .conftest import OpenFrontier


async def drain(frontier: Frontier) -> list[str]:
    """Lease and ack everything ready now; the URLs in the order they were handed out."""
    urls = []
    while (lease := await frontier.next_request()) is not None:
        urls.append(lease.request.url)
        await frontier.ack(lease)
    return urls


async def test_highest_priority_first_fifo_among_equals(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    specs = [("a", 1), ("b", 5), ("c", 1), ("d", 5), ("e", 0), ("f", 9)]
    for i, (name, prio) in enumerate(specs):
        # distinct hosts so politeness cannot reorder
        assert await frontier.enqueue_request(Request(f"http://h{i}.test/{name}", priority=prio))
    urls = await drain(frontier)
    assert [u.rsplit("/", 1)[1] for u in urls] == ["f", "b", "d", "a", "c", "e"]


async def test_fifo_within_one_host(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(max_in_flight=100)
    for i in range(20):
        await frontier.enqueue_request(Request(f"http://one.test/{i}"))
    assert [u.rsplit("/", 1)[1] for u in await drain(frontier)] == [str(i) for i in range(20)]


async def test_duplicates_are_refused_and_counted(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    assert await frontier.enqueue_request(Request("http://a.test/x?b=2&a=1"))
    assert not await frontier.enqueue_request(Request("http://A.TEST:80/x?a=1&b=2#frag"))
    assert await frontier.enqueue_request(Request("http://a.test/X?a=1&b=2"))  # path case kept
    assert await frontier.enqueue_request(Request("http://a.test/x?a=1&b=2", method="POST"))
    stats = await frontier.stats()
    assert stats.duplicates_filtered == 1
    assert stats.queued == 3
    await drain(frontier)
    # still a duplicate after it was fetched
    assert not await frontier.enqueue_request(Request("http://a.test/x?a=1&b=2"))


async def test_batch_enqueue_counts_queued(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    reqs = [Request(f"http://b.test/{i % 7}") for i in range(20)]
    assert await frontier.enqueue_requests(reqs) == 7
    assert await frontier.size() == 7


async def test_enqueue_each_says_which_were_queued(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    assert await frontier.enqueue_request(Request("http://e.test/1"))
    reqs = [Request(f"http://e.test/{i}") for i in (0, 1, 2, 0, 3)]
    assert await enqueue_each(frontier, reqs) == [True, False, True, False, True]
    assert await enqueue_each(frontier, []) == []
    assert await frontier.size() == 4
    stats = await frontier.stats()
    assert (stats.enqueued, stats.duplicates_filtered) == (4, 2)


async def test_full_queue_raises_and_forgets_nothing(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(max_size=2, full_policy="raise")
    assert await frontier.enqueue_request(Request("http://a.test/1"))
    assert await frontier.enqueue_request(Request("http://b.test/2"))
    with pytest.raises(QueueFullError):
        await frontier.enqueue_request(Request("http://c.test/3"))
    # a duplicate is still reported as such, not as full
    assert not await frontier.enqueue_request(Request("http://a.test/1"))
    lease = await frontier.next_request()
    assert lease is not None
    await frontier.ack(lease)
    # the refused request was not recorded as seen: it can be queued now
    assert await frontier.enqueue_request(Request("http://c.test/3"))


async def test_full_queue_blocks_until_room(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(max_size=1, full_policy="block")
    await frontier.enqueue_request(Request("http://a.test/1"))
    blocked = asyncio.create_task(frontier.enqueue_request(Request("http://b.test/2")))
    await asyncio.sleep(0.05)
    assert not blocked.done()
    lease = await frontier.next_request()
    assert lease is not None
    assert await asyncio.wait_for(blocked, 5)
    assert await frontier.size() == 1


async def test_per_host_delay_hands_out_other_hosts_meanwhile(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier(delay=10.0)
    await frontier.enqueue_request(Request("http://slow.test/1", priority=9))
    await frontier.enqueue_request(Request("http://slow.test/2", priority=9))
    await frontier.enqueue_request(Request("http://other.test/1"))
    first = await frontier.next_request()
    assert first is not None and first.request.url == "http://slow.test/1"
    await frontier.ack(first)
    second = await frontier.next_request()
    assert second is not None and second.request.url == "http://other.test/1"
    await frontier.ack(second)
    assert await frontier.next_request() is None  # slow.test not ready for 10 s
    clock.advance(9.9)
    assert await frontier.next_request() is None
    clock.advance(0.2)
    third = await frontier.next_request()
    assert third is not None and third.request.url == "http://slow.test/2"


async def test_per_host_in_flight_cap(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(max_in_flight=2)
    for i in range(4):
        await frontier.enqueue_request(Request(f"http://cap.test/{i}"))
    a = await frontier.next_request()
    b = await frontier.next_request()
    assert a is not None and b is not None
    assert await frontier.next_request() is None
    await frontier.ack(a)
    c = await frontier.next_request()
    assert c is not None and c.request.url == "http://cap.test/2"


async def test_host_policy_overrides(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier(delay=0.0, host_policies={"polite.test": {"delay": 5.0}})
    for i in range(2):
        await frontier.enqueue_request(Request(f"http://polite.test/{i}"))
        await frontier.enqueue_request(Request(f"http://fast.test/{i}"))
    urls = await drain(frontier)
    assert sorted(urls) == ["http://fast.test/0", "http://fast.test/1", "http://polite.test/0"]
    clock.advance(5)
    assert await drain(frontier) == ["http://polite.test/1"]


async def test_set_host_policy_at_runtime(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier()
    await frontier.set_host_policy("late.test", delay=3.0, max_in_flight=1)
    for i in range(2):
        await frontier.enqueue_request(Request(f"http://late.test:8080/{i}"))
        await frontier.enqueue_request(Request(f"http://late.test/{i}"))
    urls = await drain(frontier)
    assert "http://late.test/0" in urls and "http://late.test/1" not in urls
    assert "http://late.test:8080/1" in urls  # another port is another host
    clock.advance(3)
    assert await drain(frontier) == ["http://late.test/1"]


async def test_block_host_until(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_request(Request("http://busy.test/1"))
    await frontier.block_host("busy.test", clock.now() + 30)
    assert await frontier.next_request() is None
    assert await frontier.has_pending_requests()
    clock.advance(30)
    assert await drain(frontier) == ["http://busy.test/1"]


async def test_expired_lease_returns_request(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier(lease_timeout=60)
    await frontier.enqueue_request(Request("http://lease.test/1", meta={"k": "v"}))
    lease = await frontier.next_request()
    assert lease is not None
    assert await frontier.next_request() is None
    clock.advance(61)
    again = await frontier.next_request()
    assert again is not None
    assert again.request.url == "http://lease.test/1"
    assert again.request.meta == {"k": "v"}
    assert (await frontier.stats()).expired_leases == 1
    with pytest.raises(LeaseError):
        await frontier.ack(lease)  # the dead worker's lease is no longer valid
    await frontier.ack(again)
    assert await frontier.idle()


async def test_expired_leases_come_back_in_the_order_they_were_handed_out(
    open_frontier: OpenFrontier, clock: FakeClock
) -> None:
    """Leases of one call that expire together go back as they were handed out: FIFO among equals holds
    for them (the Redis frontier once put them back in its lease hash's order, which Redis's hash seed
    shuffles from one server start to the next)."""
    frontier = await open_frontier(lease_timeout=60)
    await frontier.enqueue_requests([Request(f"http://h{i}.order.test/") for i in range(40)])
    leases = await frontier.next_requests(40)
    assert len(leases) == 40
    clock.advance(61)
    again = await frontier.next_requests(40)
    assert [lease.request.url for lease in again] == [lease.request.url for lease in leases]
    await frontier.ack_many(again)
    assert await frontier.idle()


async def test_settling_twice_is_an_error(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_request(Request("http://twice.test/1"))
    lease = await frontier.next_request()
    assert lease is not None
    await frontier.ack(lease)
    with pytest.raises(LeaseError):
        await frontier.ack(lease)
    with pytest.raises(LeaseError):
        await frontier.retry(lease)


async def test_retry_with_delay(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_request(Request("http://retry.test/1"))
    lease = await frontier.next_request()
    assert lease is not None and lease.attempt == 1
    await frontier.retry(lease, delay=20)
    assert await frontier.size() == 1
    assert await frontier.next_request() is None
    clock.advance(20)
    again = await frontier.next_request()
    assert again is not None and again.request.url == "http://retry.test/1"
    assert again.attempt == 2
    stats = await frontier.stats()
    assert stats.retries == 1


async def test_fail_drops_and_counts(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_request(Request("http://dead.test/1"))
    lease = await frontier.next_request()
    assert lease is not None
    assert await frontier.has_pending_requests()
    assert not await frontier.idle()
    await frontier.fail(lease, "404 forever")
    assert await frontier.idle()
    assert not await frontier.has_pending_requests()
    assert (await frontier.stats()).failures == 1


async def test_not_before_at_enqueue(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_request(Request("http://later.test/1", not_before=clock.now() + 100))
    await frontier.enqueue_request(Request("http://now.test/1"))
    assert await drain(frontier) == ["http://now.test/1"]
    assert await frontier.size() == 1
    clock.advance(100)
    assert await drain(frontier) == ["http://later.test/1"]


async def test_request_survives_the_round_trip(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    original = Request(
        "http://rt.test/search?q=python&page=2",
        method="POST",
        priority=7,
        depth=3,
        meta={"target": 12, "tags": ["a", "b"]},
        headers={"X-Test": "1"},
        body=b"\x00\xffbinary",
    )
    await frontier.enqueue_request(original)
    lease = await frontier.next_request()
    assert lease is not None
    got = lease.request
    assert (got.url, got.method, got.priority, got.depth) == (original.url, "POST", 7, 3)
    assert (got.meta, got.headers, got.body) == (original.meta, original.headers, original.body)
    assert got.fingerprint == original.fingerprint
    assert lease.host == "rt.test"


async def test_next_requests_batch(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(max_in_flight=1)
    for i in range(6):
        await frontier.enqueue_request(Request(f"http://h{i % 3}.test/{i}", priority=i))
    leases = await frontier.next_requests(10)
    assert [lease.request.url for lease in leases] == [
        "http://h2.test/5",
        "http://h1.test/4",
        "http://h0.test/3",
    ]
    await frontier.ack_many(leases)
    assert len(await frontier.next_requests(10)) == 3


async def test_wait_next_waits_for_politeness(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier(delay=5.0)
    await frontier.enqueue_request(Request("http://wait.test/1"))
    await frontier.enqueue_request(Request("http://wait.test/2"))
    first = await frontier.wait_next()
    assert first is not None
    await frontier.ack(first)
    waiter = asyncio.create_task(frontier.wait_next())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    clock.advance(5)
    second = await asyncio.wait_for(waiter, 5)
    assert second is not None and second.request.url == "http://wait.test/2"
    await frontier.ack(second)
    assert await frontier.wait_next() is None  # idle: nothing queued, nothing in flight


async def test_wait_next_wakes_on_enqueue_and_times_out(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_request(Request("http://w.test/0"))
    held = await frontier.next_request()  # in flight: the frontier is not idle
    assert held is not None
    waiter = asyncio.create_task(frontier.wait_next())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await frontier.enqueue_request(Request("http://w.test/1"))
    got = await asyncio.wait_for(waiter, 5)
    assert got is not None and got.request.url == "http://w.test/1"
    timed = asyncio.create_task(frontier.wait_next(timeout=10))
    await asyncio.sleep(0.05)
    clock.advance(10)
    assert await asyncio.wait_for(timed, 5) is None


async def test_async_iteration_until_idle(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_requests(Request(f"http://it{i}.test/") for i in range(5))
    seen = []
    async for lease in frontier:
        seen.append(lease.request.host)
        if lease.request.host == "it0.test":
            await frontier.enqueue_request(Request("http://it0.test/child"))
        await frontier.ack(lease)
    assert len(seen) == 6


async def test_stats(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier()
    await frontier.enqueue_request(Request("http://s1.test/a"))
    clock.advance(4)
    await frontier.enqueue_request(Request("http://s1.test/b"))
    await frontier.enqueue_request(Request("http://s2.test/a"))
    await frontier.enqueue_request(Request("http://s2.test/a"))
    lease = await frontier.next_request()
    assert lease is not None
    clock.advance(1)
    stats = await frontier.stats()
    assert stats.queued == 2
    assert stats.in_flight == 1
    assert stats.enqueued == 3
    assert stats.duplicates_filtered == 1
    assert sum(stats.hosts.values()) == 2
    assert stats.oldest_queued_age is not None and 1 <= stats.oldest_queued_age <= 5


async def test_bloom_dupefilter(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(dupefilter="bloom", error_rate=1e-6, capacity=1000)
    for i in range(200):
        assert await frontier.enqueue_request(Request(f"http://bloom.test/{i}"))
    for i in range(200):
        assert not await frontier.enqueue_request(Request(f"http://bloom.test/{i}"))
    assert await frontier.size() == 200


def test_lease_is_a_value(clock: FakeClock) -> None:
    lease = Lease("t", Request("http://x.test/"), clock.now() + 1)
    assert lease.host == "x.test"


async def test_host_states(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    """Per host: depth, in flight, its cap and delay, when it is ready next, and a back-off apart from
    the delay -- what the console's Frontier page and `crawlherd explain` show."""
    frontier = await open_frontier(delay=0.0, max_in_flight=4)
    await frontier.set_host_policy("slow.test", delay=10.0, max_in_flight=1)
    for i in range(3):
        await frontier.enqueue_request(Request(f"http://slow.test/{i}"))
    await frontier.enqueue_request(Request("http://held.test/1"))
    await frontier.enqueue_request(Request("http://later.test/1", not_before=clock.now() + 50))
    await frontier.block_host("held.test", clock.now() + 30)
    lease = await frontier.next_request()
    assert lease is not None and lease.request.host == "slow.test"
    assert await frontier.next_request() is None  # slow.test at its cap, held.test blocked, later.test not due
    clock.advance(1)
    states = (await frontier.stats()).host_states
    slow, held = states["slow.test"], states["held.test"]
    assert (slow.queued, slow.in_flight, slow.max_in_flight, slow.delay) == (2, 1, 1, 10.0)
    assert slow.ready_in == pytest.approx(9.0) and slow.backoff == 0 and not slow.blocked and slow.held
    assert (held.queued, held.in_flight, held.max_in_flight, held.delay) == (1, 0, 4, 0.0)
    assert held.ready_in == pytest.approx(29.0) and held.backoff == pytest.approx(29.0) and held.blocked
    assert states["later.test"].queued == 1
    summary = (await frontier.stats()).summary()
    assert summary["blocked_hosts"] == 1 and summary["host_states"]["held.test"]["backoff"] == pytest.approx(29.0)
    # the back-off ends; the lease is settled: nothing holds either host any more
    clock.advance(30)
    await frontier.ack(lease)
    states = (await frontier.stats()).host_states
    assert states["held.test"].ready_in == 0 and not states["held.test"].blocked and not states["held.test"].held
    assert states["slow.test"].in_flight == 0 and states["slow.test"].ready_in == 0
    drained = await drain(frontier)
    assert len(drained) >= 2
    assert "held.test" not in (await frontier.stats()).host_states  # nothing queued, nothing held: not listed


# -- robots first (enqueue_robots): a host's robots.txt request is work of its host, handed out first ----


def robots(host: str, priority: int = 0) -> Request:
    return Request(f"http://{host}/robots.txt", priority=priority, meta={"robots_txt": True})


async def test_robots_request_first_then_its_host_is_held_until_settled(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(delay=0.0, max_in_flight=8)
    for i in range(3):
        assert await frontier.enqueue_request(Request(f"http://r.test/{i}", priority=5))
    assert await frontier.enqueue_robots(robots("r.test", priority=0))  # lower priority, still first
    assert not await frontier.enqueue_robots(robots("r.test"))  # once per host
    await frontier.enqueue_request(Request("http://other.test/1", priority=-1))
    assert (await frontier.stats()).hosts == {"r.test": 4, "other.test": 1}
    first = await frontier.next_request()
    assert first is not None and first.request.url == "http://r.test/robots.txt"
    assert first.request.meta == {"robots_txt": True}
    # while its answer is not in, nothing else of r.test goes (other hosts do), even pages queued now
    await frontier.enqueue_request(Request("http://r.test/late", priority=9))
    assert await drain(frontier) == ["http://other.test/1"]
    assert await frontier.has_pending_requests()
    await frontier.ack(first)
    assert await drain(frontier) == ["http://r.test/late", "http://r.test/0", "http://r.test/1", "http://r.test/2"]
    assert not await frontier.enqueue_robots(robots("r.test"))  # still once, after it was fetched
    stats = await frontier.stats()
    assert (stats.enqueued, stats.acked, stats.queued) == (6, 6, 0)
    assert await frontier.idle()


async def test_robots_request_counts_against_its_hosts_politeness(
    open_frontier: OpenFrontier, clock: FakeClock
) -> None:
    frontier = await open_frontier(delay=10.0)
    assert await frontier.enqueue_robots(robots("slow.test"))
    await frontier.enqueue_request(Request("http://slow.test/page"))
    lease = await frontier.next_request()
    assert lease is not None and lease.request.url.endswith("/robots.txt")
    await frontier.ack(lease)
    assert await frontier.next_request() is None  # the host's delay runs from the robots hand-out
    clock.advance(10)
    assert await drain(frontier) == ["http://slow.test/page"]


async def test_robots_request_retried_or_expired_comes_back_first(
    open_frontier: OpenFrontier, clock: FakeClock
) -> None:
    frontier = await open_frontier(delay=0.0, lease_timeout=60)
    await frontier.enqueue_request(Request("http://back.test/page", priority=3))
    assert await frontier.enqueue_robots(robots("back.test"))
    lease = await frontier.next_request()
    assert lease is not None and lease.request.url.endswith("/robots.txt")
    await frontier.retry(lease, delay=5)
    assert await frontier.next_request() is None  # the page stays held while robots.txt waits
    clock.advance(5)
    again = await frontier.next_request()
    assert again is not None and again.request.url.endswith("/robots.txt")
    assert again.attempt == 2
    assert await frontier.next_request() is None
    clock.advance(61)  # the lease expires: back, still first
    third = await frontier.next_request()
    assert third is not None and third.request.url.endswith("/robots.txt")
    assert await frontier.next_request() is None
    await frontier.fail(third, "robots.txt could not be read")  # fail settles it too: the pages go
    assert await drain(frontier) == ["http://back.test/page"]
    assert await frontier.idle()
