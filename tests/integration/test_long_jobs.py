"""Leases: a job longer than the broker's lease runs once (the worker extends its claim while it works),
and the frontier's lease is the frontier URL's ``?lease_timeout=`` unless the worker is told otherwise.

Two workers consume one broker whose lease (SQLite/memory ``visibility_timeout``, Redis ``claim_idle``)
is a fraction of the job's length; without the heartbeat the second worker takes the job when the
lease runs out and fetches its listing page a second time. RabbitMQ has no client-side lease (see
``docs/brokers.md``: ``consumer_timeout`` on the server): it is run too, and the job runs once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.brokers.base import Broker, Delivery
from crawlherd.db import JobRun
from crawlherd.dispatch.dispatch_service import DispatchService
from crawlherd.fetch.base import FetchLimits
from crawlherd.request import Request
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.dispatch import dispatch_due, relay_all
from tests.support.fixtures import BROKERS, scratch_broker

# seconds; the job takes four leases, a touch every third of one (0.6 s failed once: a touch came late on a
# saturated machine)
LEASE = 1.0


@pytest.fixture(params=BROKERS)
async def short_lease_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> AsyncIterator[str]:
    async for url in scratch_broker(request, tmp_path, unique_name, {
            "memory": f"&visibility_timeout={LEASE}", "sqlite": f"&visibility_timeout={LEASE}&poll_interval=0.05",
            "redis": f"&claim_idle={LEASE}&block=0.1"}):
        yield url


async def two_workers_run_the_job(engine: AsyncEngine, one: Broker, two: Broker) -> list[Worker]:
    """The due job dispatched to ``one``; a worker on each broker runs until one of them succeeded, and a
    while longer: a second delivery, were there one, would be taken by then. The two workers, stopped."""
    service = DispatchService(engine, one)
    await dispatch_due(service)
    await relay_all(service)
    limits = FetchLimits(allow_private_addresses=True)
    workers = [Worker(engine, b, WorkerOptions(concurrency=1, limits=limits, name=n))
               for b, n in ((one, "w1"), (two, "w2"))]
    stop = asyncio.Event()
    async with workers[0], workers[1]:
        running = [asyncio.create_task(w.run(stop)) for w in workers]
        while sum(w.stats.succeeded for w in workers) < 1:  # bounded by the test's timeout
            assert not any(t.done() for t in running)
            await asyncio.sleep(0.05)
        await asyncio.sleep(3 * LEASE)
        stop.set()
        await asyncio.gather(*running)
    return workers


@pytest.mark.timeout(60)
async def test_a_job_longer_than_the_brokers_lease_runs_once(
    engine: AsyncEngine, board: Board, tmp_path: Path, short_lease_url: str  # noqa: F811
) -> None:
    board.slow = 4 * LEASE  # the job's one listing page: four leases long
    await load(engine, tmp_path, website(board, robots="ignore"), ["long"], due=True)
    async with open_broker(short_lease_url) as one, open_broker(short_lease_url) as two:
        workers = await two_workers_run_the_job(engine, one, two)
        assert await one.pending() == 0
    assert board.fetched("/search") == ["/search?q=long"]
    assert sum(w.stats.received for w in workers) == 1
    async with engine.connect() as conn:
        assert (await conn.execute(select(JobRun.status, JobRun.attempts))).all() == [("succeeded", 1)]


@pytest.mark.timeout(60)
async def test_a_slow_extension_of_the_claim_is_waited_for_not_dropped(
    engine: AsyncEngine, board: Board, tmp_path: Path, unique_name: str  # noqa: F811
) -> None:
    """Each extension takes half the lease (a busy database, a loaded machine): the worker waits for it
    as long as its claim lasts. It used to give an extension up after a third of the lease and try again
    a third later, so the claim ran out and the other worker fetched the job's listing page again."""
    board.slow = 4 * LEASE
    await load(engine, tmp_path, website(board, robots="ignore"), ["slow-touch"], due=True)
    url = f"memory://{unique_name}?visibility_timeout={LEASE}"
    async with open_broker(url) as one, open_broker(url) as two:
        for broker in (one, two):
            touch = broker.touch

            async def slow_touch(delivery: Delivery, touch: Callable[[Delivery], Awaitable[None]] = touch) -> None:
                await asyncio.sleep(LEASE / 2)
                await touch(delivery)

            broker.touch = slow_touch  # type: ignore[method-assign]
        workers = await two_workers_run_the_job(engine, one, two)
    assert board.fetched("/search") == ["/search?q=slow-touch"]
    assert sum(w.stats.received for w in workers) == 1


@pytest.mark.timeout(30)
async def test_the_frontier_urls_lease_timeout_is_kept_and_a_dead_workers_page_comes_back_in_it(
    engine: AsyncEngine, tmp_path: Path  # noqa: F811
) -> None:
    url = f"sqlite:///{tmp_path / 'frontier.db'}?lease_timeout=0.5"
    async with open_broker("memory://") as broker:
        dead = Worker(engine, broker, WorkerOptions(frontier_url=url, name="dead"))
        async with dead:
            assert dead.frontier is not None
            assert dead.frontier.options.lease_timeout == 0.5  # type: ignore[attr-defined]
            await dead.frontier.enqueue_request(Request("https://example.test/detail/1"))
            assert await dead.frontier.next_request() is not None  # leased ... and the worker dies
        alive = Worker(engine, broker, WorkerOptions(frontier_url=url, name="alive"))
        async with alive:
            assert alive.frontier is not None
            again = await alive.frontier.wait_next(timeout=10)  # after its lease: 0.5 s, not minutes
            assert again is not None and again.request.url == "https://example.test/detail/1"
        told = Worker(engine, broker, WorkerOptions(frontier_url=url, lease_timeout=3.0))
        async with told:
            assert told.frontier.options.lease_timeout == 3.0  # type: ignore[union-attr]
