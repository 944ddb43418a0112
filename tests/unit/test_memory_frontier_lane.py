"""The ``memory://`` frontier's cheap paths -- the lane (new requests of one priority, handed out FIFO
while nothing else is queued) and the lazy enqueue (``enqueue_lazily``: requests taken out of their
iterable only when due) -- decide exactly as the host-aware index alone does.

The reference is the ``sqlite://`` frontier, which schedules on the same index without either path:
for any sequence of operations both hand out the same requests in the same order and report the same
counts. A lazy enqueue is checked against ``enqueue_requests`` of the same requests at the same time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crawlherd.clock import FakeClock
from crawlherd.fetch.robots import robots_request
from crawlherd.frontier import Frontier, Lease, open_scheduler
from crawlherd.frontier.memory import MemoryFrontier
from crawlherd.request import Request

HOSTS = ["a.test", "b.test"]

# One operation: (name, a small int, another) -- the ints pick a host, a URL, a priority, a delay.
op = st.tuples(
    st.sampled_from([
        "enqueue", "enqueue", "enqueue_many", "lazy", "lazy", "next", "next", "next", "ack", "fail", "retry",
        "block", "policy", "robots", "advance", "stats",
    ]),
    st.integers(0, 5),
    st.integers(0, 5),
)


def request(host: int, n: int, priority: int = 0, not_before: float | None = None) -> Request:
    return Request(f"http://{HOSTS[host % 2]}/p{n}", priority=priority, not_before=not_before)


async def scenario(frontier: Frontier, clock: FakeClock, ops: list[tuple[str, int, int]], lazy: bool) -> list[object]:
    """Run ``ops``; what was observed on the way (hand-outs, counts)."""
    seen: list[object] = []
    held: list[Lease] = []
    n = 0
    for name, x, y in ops:
        if name == "enqueue":
            n += 1
            prio = 1 if y == 5 else 0
            not_before = clock.now() + 3 if y == 4 else None
            seen.append(await frontier.enqueue_request(request(x, n % 7, prio, not_before)))
        elif name in ("enqueue_many", "lazy"):
            batch = [request(x + i // 3, n + i) for i in range(y + 1)]  # repeats: n moves by one only
            n += 1
            if name == "lazy" and lazy:
                assert isinstance(frontier, MemoryFrontier)
                await frontier.enqueue_lazily(iter(batch), len(batch))
            else:
                queued = await frontier.enqueue_requests(batch)
                if name == "enqueue_many":  # a lazy enqueue does not count (duplicates are found later)
                    seen.append(queued)
        elif name == "next":
            lease = await frontier.next_request()
            seen.append(None if lease is None else (lease.request.url, lease.attempt))
            if lease is not None:
                held.append(lease)
        elif name in ("ack", "fail", "retry") and held:
            lease = held.pop(x % len(held))
            if name == "ack":
                await frontier.ack(lease)
            elif name == "fail":
                await frontier.fail(lease, "no")
            else:
                await frontier.retry(lease, float(y % 3))
        elif name == "block":
            await frontier.block_host(HOSTS[x % 2], clock.now() + y)
        elif name == "policy":
            await frontier.set_host_policy(HOSTS[x % 2], delay=float(y % 3), max_in_flight=1 + y % 2)
        elif name == "robots":
            seen.append(await frontier.enqueue_robots(robots_request(f"http://{HOSTS[x % 2]}/")))
        elif name == "advance":
            clock.advance(1 + y)
        elif name == "stats":
            st_ = await frontier.stats()
            seen.append((st_.queued, st_.in_flight, st_.enqueued, st_.duplicates_filtered, st_.hosts))
    while True:  # drain: everything queued comes out, in the same order
        lease = await frontier.next_request()
        if lease is None:
            if not held:
                clock.advance(60)
                lease = await frontier.next_request()
                if lease is None:
                    break
            else:
                await frontier.ack(held.pop(0))
                continue
        seen.append((lease.request.url, lease.attempt))
        await frontier.ack(lease)
    seen.append(await frontier.size())
    return seen


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, max_size=60))
# a page queued while its host's robots.txt is out on lease waits for it
@example(ops=[("robots", 0, 0), ("next", 0, 0), ("enqueue", 0, 0), ("next", 0, 0), ("ack", 0, 0), ("next", 0, 0)])
# a host with a delay: the second page waits for it
@example(ops=[("policy", 0, 1), ("enqueue", 0, 0), ("enqueue", 0, 1), ("next", 0, 0), ("next", 0, 0)])
# the cap: a third page of a host with two out waits
@example(ops=[("lazy", 0, 5), ("next", 0, 0), ("next", 0, 0), ("next", 0, 0), ("retry", 0, 0), ("next", 0, 0)])
def test_the_lane_and_the_lazy_enqueue_decide_as_the_index_does(
    tmp_path: Path, ops: list[tuple[str, int, int]]
) -> None:
    async def both() -> tuple[list[object], list[object]]:
        db = tmp_path / "ref.db"
        db.unlink(missing_ok=True)
        clock_m, clock_s = FakeClock(), FakeClock()
        memory = open_scheduler("memory://", clock=clock_m, max_in_flight=2, lease_timeout=30)
        sqlite = open_scheduler(f"sqlite:///{db}", clock=clock_s, max_in_flight=2, lease_timeout=30)
        async with memory, sqlite:
            return await scenario(memory, clock_m, ops, lazy=True), await scenario(sqlite, clock_s, ops, lazy=False)

    got, expected = asyncio.run(both())
    assert got == expected


async def test_a_lazy_enqueue_takes_requests_only_as_they_are_handed_out() -> None:
    taken = 0

    def requests() -> Iterator[Request]:
        nonlocal taken
        for i in range(1000):
            taken += 1
            yield Request(f"http://a.test/{i}")

    async with open_scheduler("memory://", clock=FakeClock(), max_in_flight=1000) as frontier:
        assert isinstance(frontier, MemoryFrontier)
        await frontier.enqueue_lazily(requests(), 1000)
        assert taken == 0
        got = [await frontier.wait_next() for _ in range(3)]
        assert [lease.request.url for lease in got if lease] == [f"http://a.test/{i}" for i in range(3)]
        assert taken < 100  # only a chunk ahead of what was handed out
        assert await frontier.size() == 997  # asking for the size takes the rest: the exact answer
        assert taken == 1000


async def test_a_lazy_enqueue_that_breaks_its_promise_says_so() -> None:
    async with open_scheduler("memory://", clock=FakeClock()) as frontier:
        assert isinstance(frontier, MemoryFrontier)
        mixed = [Request("http://a.test/1"), Request("http://a.test/2", priority=3)]
        await frontier.enqueue_lazily(iter(mixed), 2)
        with pytest.raises(ValueError, match="one priority and no not_before"):
            await frontier.next_request()


async def test_a_lazy_enqueue_with_more_requests_than_its_count_says_so() -> None:
    async with open_scheduler("memory://", clock=FakeClock()) as frontier:
        assert isinstance(frontier, MemoryFrontier)
        await frontier.enqueue_lazily(iter([Request("http://a.test/1"), Request("http://a.test/2")]), 1)
        with pytest.raises(ValueError, match="more requests than the count"):
            await frontier.size()
