"""The frontier contract, leases: bound to their holder's liveness and fenced -- every backend.

A lease ends at its deadline (``lease_timeout``: the bound of one page on a live holder) or, on a
frontier shared by processes (``redis://``, ``redis+cluster://``), about ``liveness`` (15 s) after its
holder stopped renewing it. On ``sqlite://`` the holder is the process that has the file open (a lock):
its leases come back as soon as the next process opens it. ``memory://`` dies with its holder. A lease
taken back cannot be settled by its old holder: the token is checked by every settle, and a refused
settle changes nothing.
"""

from __future__ import annotations

import pytest

from crawlherd import FakeClock, Request
from crawlherd.errors import LeaseError
from crawlherd.frontier import Frontier

from .conftest import OpenFrontier

LIVENESS = 15.0  # the redis frontier's default ``liveness``


async def keep_alive(frontier: Frontier) -> None:
    """What a live holder does in the background (every third of ``liveness``), done now: renew every
    lease it holds. Nothing to do where the holder is the process that has the frontier open."""
    renewal = getattr(frontier, "renewal", None)
    if renewal is not None:
        await renewal.renew()


async def stop_renewing(frontier: Frontier) -> None:
    """The holder hangs (SIGSTOP): it keeps its connections and its leases' tokens, renews nothing."""
    renewal = getattr(frontier, "renewal", None)
    if renewal is not None:
        await renewal.close()


async def test_a_live_holder_keeps_its_lease_until_the_deadline(open_frontier: OpenFrontier, clock: FakeClock) -> None:
    frontier = await open_frontier(lease_timeout=60)
    await frontier.enqueue_request(Request("http://live.test/1"))
    lease = await frontier.next_request()
    assert lease is not None
    for _ in range(4):  # 48 s: more than three times the liveness bound, renewed all along
        clock.advance(LIVENESS * 0.8)
        await keep_alive(frontier)
        assert await frontier.next_request() is None
    clock.advance(60 - 4 * LIVENESS * 0.8 + 1)  # the deadline passed: renewing never goes beyond it
    await keep_alive(frontier)
    again = await frontier.next_request()
    assert again is not None and again.request.url == "http://live.test/1"
    with pytest.raises(LeaseError):
        await frontier.ack(lease)
    await frontier.ack(again)
    assert await frontier.idle()


async def test_a_dead_holders_lease_comes_back_after_the_liveness_bound(
    open_frontier: OpenFrontier, clock: FakeClock, backend: str
) -> None:
    if backend == "memory":
        pytest.skip("a memory:// frontier dies with the process that holds its leases")
    holder = await open_frontier(lease_timeout=300)
    await holder.enqueue_request(Request("http://dead.test/1", meta={"k": "v"}))
    await holder.enqueue_request(Request("http://dead.test/2"))
    held = [await holder.next_request(), await holder.next_request()]
    assert all(lease is not None for lease in held)
    await holder.close()  # killed: it settles nothing, renews nothing
    other = await open_frontier(lease_timeout=300)
    if backend != "sqlite":  # sqlite: the next process to open the file takes them back at once
        clock.advance(LIVENESS - 1)
        assert await other.next_request() is None  # within the bound: still the dead holder's
        clock.advance(2)
    back = [await other.next_request(), await other.next_request()]
    assert sorted(lease.request.url for lease in back if lease is not None) == [
        "http://dead.test/1", "http://dead.test/2"
    ]
    assert (await other.stats()).expired_leases == 2
    for lease in back:
        assert lease is not None
        await other.ack(lease)
    assert await other.idle()


async def test_a_hung_holders_settles_are_refused_and_change_nothing(
    open_frontier: OpenFrontier, clock: FakeClock, backend: str
) -> None:
    """A holder that hangs past the bound (liveness on a shared frontier, else the deadline) loses its
    leases; resumed, it cannot ack, retry or fail them: the new holder's leases stand."""
    shared = backend.startswith("redis")
    hung = await open_frontier(lease_timeout=60)
    for i in range(3):
        await hung.enqueue_request(Request(f"http://hung{i}.test/"))
    stale = [await hung.next_request() for _ in range(3)]
    await stop_renewing(hung)
    taker = await open_frontier(lease_timeout=60) if shared else hung
    clock.advance(LIVENESS + 1 if shared else 61)
    taken = [await taker.next_request() for _ in range(3)]
    assert all(lease is not None for lease in taken)
    before = await taker.stats()
    for lease, settle in zip(stale, ("ack", "retry", "fail"), strict=True):
        assert lease is not None
        with pytest.raises(LeaseError):
            await (hung.ack(lease) if settle == "ack" else hung.retry(lease) if settle == "retry"
                   else hung.fail(lease, "resumed"))
    after = await taker.stats()
    assert (after.in_flight, after.queued, after.acked, after.failures, after.retries) == (
        before.in_flight, before.queued, before.acked, before.failures, before.retries
    ) == (3, 0, 0, 0, 0)
    assert await taker.next_request() is None  # nothing was put back by the stale retry
    for lease in taken:
        assert lease is not None
        await taker.ack(lease)
    assert (await taker.stats()).acked == 3
    assert await taker.idle()
