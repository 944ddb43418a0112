"""Priority order, as a property, on every backend: every batch ``next_requests(k)`` hands out is sorted --
highest priority first, FIFO (the order the frontier accepted them in) among equal priorities -- and, when
no politeness holds a host back, it is the best ``k`` of all that is queued.

Seeded random cases (not hypothesis: each case needs the frontier emptied, not a new one per example, so
that a Redis Cluster's shards are not created hundreds of times); a failure names its seed.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from crawlherd import Request
from crawlherd.frontier import Frontier, Lease

from .conftest import OpenFrontier

CASES = 25


class Model:
    """What is queued, in the order it must come out: (-priority, the order it was accepted in)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.rank: dict[str, tuple[int, int]] = {}
        self.queued: set[str] = set()
        self.accepted = 0
        self.cap: dict[str, int] = {}  # a host's in-flight cap (none: uncapped)
        self.out: dict[str, int] = {}  # a host's leases out

    def enqueue(self, requests: list[Request]) -> int:
        new = 0
        for r in requests:
            if r.url in self.seen:
                continue
            self.seen.add(r.url)
            self.rank[r.url] = (-r.priority, self.accepted)
            self.accepted += 1
            self.queued.add(r.url)
            new += 1
        return new

    def best(self, k: int) -> list[str]:
        """The best ``k`` that may be handed out now: by rank, passing over a host at its cap."""
        out, room = [], {}
        for url in sorted(self.queued, key=self.rank.__getitem__):
            host = url.split("/")[2]
            left = room.setdefault(host, self.cap.get(host, 1 << 30) - self.out.get(host, 0))
            if left > 0:
                room[host] = left - 1
                out.append(url)
                if len(out) == k:
                    break
        return out

    def leased(self, urls: list[str]) -> None:
        for url in urls:
            host = url.split("/")[2]
            self.out[host] = self.out.get(host, 0) + 1

    def settled(self, urls: list[str]) -> None:
        for url in urls:
            self.out[url.split("/")[2]] -= 1


async def run_case(frontier: Frontier, rng: random.Random, case: int, *, capped: bool) -> None:
    model = Model()
    hosts = [f"c{case}h{j}.order.test" for j in range(rng.randint(1, 12))]
    prios = rng.choice([(0, 1), (0, 3), (-5, 5), (0, 100)])
    if capped:
        for host in hosts:
            model.cap[host] = rng.randint(1, 3)
            await frontier.set_host_policy(host, max_in_flight=model.cap[host])
    held: list[Lease] = []
    n = 0
    for step in range(rng.randint(3, 14)):
        if rng.random() < 0.6:
            batch = []
            for _ in range(rng.randint(1, 60)):
                # about one in ten repeats an earlier URL: a duplicate, refused
                k = rng.randrange(n) if n and rng.random() < 0.1 else n
                n += k == n
                batch.append(Request(f"http://{rng.choice(hosts)}/{k}", priority=rng.randint(*prios)))
            expect = model.enqueue(batch)
            assert await frontier.enqueue_requests(batch) == expect, (case, step)
        else:
            k = rng.randint(1, 40)
            leases = await frontier.next_requests(k)
            check(model, leases, k, case, step)
            held += leases
            rng.shuffle(held)
            done, held = held[: len(held) // 2 + 1], held[len(held) // 2 + 1 :]
            await frontier.ack_many(done)
            model.settled([lease.request.url for lease in done])
    await frontier.ack_many(held)
    model.settled([lease.request.url for lease in held])
    while leases := await frontier.next_requests(k := rng.randint(1, 40)):
        check(model, leases, k, case, "drain")
        await frontier.ack_many(leases)
        model.settled([lease.request.url for lease in leases])
    assert not model.queued, (case, len(model.queued))


def check(model: Model, leases: list[Lease], k: int, case: int, step: Any) -> None:
    """The batch of ``next_requests(k)`` in order, and the best ``k`` of all that is queued that may be
    handed out now (a host at its cap passed over)."""
    urls = [lease.request.url for lease in leases]
    ranks = [model.rank[u] for u in urls]
    inversions = sum(1 for a, b in zip(ranks, ranks[1:], strict=False) if b < a)
    assert inversions == 0, (case, step, ranks)
    assert urls == model.best(k), (case, step)
    model.queued -= set(urls)
    model.leased(urls)


@pytest.mark.parametrize("capped", [False, True], ids=["no-caps", "host-caps"])
async def test_every_batch_in_priority_order(open_frontier: OpenFrontier, capped: bool) -> None:
    frontier = await open_frontier(max_in_flight=10_000)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for case in range(CASES):
        try:
            await run_case(frontier, rng, case, capped=capped)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, case {case}: {exc}") from exc
