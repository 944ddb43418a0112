"""Where the Redis frontier's keys live: its **shards**.

A shard is one complete frontier of layout 6 (the keys listed at the top of
``frontier/lua/prelude.lua``: the loose requests ``gq``, per-host queues ``q:<host>``, the ``ready`` and
``timers`` host indexes, ``delayed``, the leases ``l:<call>``/``lb:<call>``/``lexp``/``ldet``/``att``, host
states ``h``, policies ``pdelay``/``pcap``, counters ``c``, ``cfg``, the duplicate filter ``df:<n>`` or ``bloom``,
``bad``, serials) under a key prefix ``KP``; every script runs on one shard and touches only its keys. A host belongs
to exactly one shard (``crc32(host) % shards``), and so do its requests, its politeness state and the
fingerprints of its requests (a fingerprint's URL names its host): dedup with enqueue, politeness and leases
stay one atomic script per shard. The frontier's code is the same for one shard and for many; what differs
is here, in :class:`OneRedis` and :class:`ClusterShards`.

- ``redis://`` (one Redis) is **one shard**, ``KP`` = the prefix (``mycrawl:q:<host>``, ...). The
  client takes a batch's request numbers from the shard's own counter (``KP:seq``) before its ENQUEUE;
  the scripts check ``max_size`` themselves (atomically); lease tokens are the scripts' own.
- ``redis+cluster://host:port,host:port?prefix=p&shards=12``: ``shards`` shards (default 12, or the
  number the frontier was created with), shard ``k``'s ``KP`` the hash tag ``{p.k.j}``, ``j`` the first
  number that puts the tag's slot in the ``k``-th of ``shards`` equal slices of the 16,384 slots -- so
  the shards spread evenly over masters that hold equal slot ranges, and all of a shard's keys are in
  one slot. Besides the shards: ``{p}:shards`` (STRING, the shard count, fixed at creation) and
  ``{p}:seq`` (STRING, the request counter the shards share, so that FIFO among equal priorities holds
  across shards). A lease asks every shard for the scores of the best ``limit`` requests it would hand
  out now (``HEADS``: picked as its ``LEASE`` picks them), merges them, leases from each shard as many as
  it has among the best ``limit`` of all (in parallel), and merges the leases by queue score; ack and retry go
  to the shard named in the lease token (``"<shard>/<token>"``). ``max_size`` is checked against the shards'
  counts read just before each batch: concurrent enqueuers may pass it by at most their batches. The frontier
  talks to the master of each shard's slot (:mod:`._cluster`) and finds it again after a failover.
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple

import redis.asyncio as aioredis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from crawlherd.errors import ConfigurationError, LeaseError
from crawlherd.frontier.redis._cluster import ClusterMap
from crawlherd.frontier.redis._codec import text

__all__ = ["ClusterShards", "LeasePlan", "OneRedis", "Shard", "Shards"]

DEFAULT_SHARDS = 12  # spreads evenly over 1, 2, 3, 4, 6 or 12 masters


class Shard(NamedTuple):
    """One shard: its number, the prefix of its keys and their slot (0 outside a cluster)."""

    number: int
    kp: str
    slot: int


class LeasePlan(NamedTuple):
    """How many to lease from which shard (``quota``: shard number -> count, asked in parallel)."""

    quota: dict[int, int]


#: The HEADS of the shards asked (shard number -> how many): the scores of the best requests each would
#: hand out now, best first (or the error it raised), in the order asked.
HeadsFn = Callable[[dict[int, int]], Awaitable[list[Any]]]


class Shards:
    """The shards of one frontier and the clients that reach them. Subclasses: :class:`OneRedis`,
    :class:`ClusterShards`. The methods that talk to Redis raise redis-py's errors: the caller maps them
    (``_calls.RedisCalls.guard``)."""

    prefix: str
    all: list[Shard]

    async def open(self) -> None:
        """Find the shards (before the first script runs)."""

    async def client(self, slot: int) -> aioredis.Redis:
        raise NotImplementedError

    def forget(self) -> None:
        """An operation failed: find the servers again on the next call (a failover may have moved them)."""

    def of(self, host: str) -> Shard:
        """The shard of ``host``'s requests."""
        shards = self.all
        return shards[zlib.crc32(host.encode("utf-8")) % len(shards)]

    def token(self, shard: Shard, inner: str) -> str:
        """A lease token (or an entry id) as the caller sees it."""
        return f"{shard.number}/{inner}"

    def group(self, tokens: Iterable[str]) -> dict[int, list[str]]:
        """Lease tokens by the number of their shard, each as its scripts know it."""
        groups: dict[int, list[str]] = {}
        for token in tokens:
            shard, inner = self.split(token)
            groups.setdefault(shard.number, []).append(inner)
        return groups

    def split(self, token: str) -> tuple[Shard, str]:
        """The shard a lease token names, and the token as its scripts know it."""
        k, _, inner = token.partition("/")
        if not k.isdigit() or int(k) >= len(self.all):
            raise LeaseError(f"lease token {token!r} names no shard of this frontier")
        return self.all[int(k)], inner

    async def numbers(self, n: int) -> tuple[int, str]:
        """The first of ``n`` request numbers (FIFO among equal priorities: in the order they were taken), and
        where ENQUEUE is told they come from: ``"own"`` (the shard's own counter) or ``"seq"`` (a counter the
        shards share)."""
        raise NotImplementedError

    async def limits(self, max_size: int, counts: Callable[[], Awaitable[list[int]]], hosts: Sequence[str]
                     ) -> dict[int, int]:
        """Each shard's ``max_size`` for an ENQUEUE of requests of ``hosts``, in order (``counts``: every
        shard's queued count)."""
        raise NotImplementedError

    async def lease_plan(self, limit: int, heads: HeadsFn) -> LeasePlan:
        """Where to lease the best ``limit`` ready requests from."""
        raise NotImplementedError

    async def nodes(self) -> list[aioredis.Redis]:
        """A client of every server holding keys of the frontier (admin: scan, measure, purge)."""
        raise NotImplementedError

    def match(self) -> str:
        """SCAN MATCH for every key of the frontier."""
        raise NotImplementedError

    def key_name(self, key: str) -> str:
        """A key's name within its shard (``q:<host>``, ``df:3``, ...)."""
        raise NotImplementedError

    async def unlink(self, node: aioredis.Redis, keys: list[Any]) -> int:
        return int(await node.unlink(*keys))

    async def aclose(self) -> None:
        """Close the clients the frontier opened."""


class OneRedis(Shards):
    """``redis://``: one Redis, one shard whose keys start with the prefix."""

    def __init__(self, client: aioredis.Redis, prefix: str, *, owns_client: bool) -> None:
        self.prefix = prefix
        self.all = [Shard(0, prefix, 0)]
        self._client = client
        self._owns = owns_client

    async def client(self, slot: int) -> aioredis.Redis:
        return self._client

    def of(self, host: str) -> Shard:
        return self.all[0]

    def token(self, shard: Shard, inner: str) -> str:
        return inner

    def split(self, token: str) -> tuple[Shard, str]:
        return self.all[0], token

    async def numbers(self, n: int) -> tuple[int, str]:
        # the shard's own counter (ENQUEUE takes the requests numbered and their members written whole)
        return int(await self._client.incrby(f"{self.prefix}:seq", n)) - n + 1, "own"

    async def limits(self, max_size: int, counts: Callable[[], Awaitable[list[int]]], hosts: Sequence[str]
                     ) -> dict[int, int]:
        return {0: max_size}  # the script checks it, atomically

    async def lease_plan(self, limit: int, heads: HeadsFn) -> LeasePlan:
        return LeasePlan({0: limit})  # the shard's LEASE takes the best itself

    async def nodes(self) -> list[aioredis.Redis]:
        return [self._client]

    def match(self) -> str:
        return f"{_glob(self.prefix)}:*"

    def key_name(self, key: str) -> str:
        return key[len(self.prefix) + 1 :]

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()


class ClusterShards(Shards):
    """``redis+cluster://``: ``shards`` shards spread over the masters of a cluster."""

    def __init__(self, cluster: ClusterMap, prefix: str, *, want: int | None) -> None:
        if "{" in prefix or "}" in prefix:
            raise ConfigurationError(f"redis+cluster frontier prefix {prefix!r} must not contain braces")
        self.prefix = prefix
        self.all = []  # known at open()
        self._cluster = cluster
        self._want = want

    async def open(self) -> None:
        self.all = _cluster_shards(self.prefix, await self._shard_count())

    async def _shard_count(self) -> int:
        """The shard count stored at ``{prefix}:shards`` (set on first use: ``shards=`` or the default)."""
        key = f"{{{self.prefix}}}:shards"
        client = await self.client(key_slot(key.encode()))
        await client.set(key, self._want or DEFAULT_SHARDS, nx=True)
        have = int(text(await client.get(key)))
        if self._want is not None and self._want != have:
            raise ConfigurationError(
                f"the frontier under prefix {self.prefix!r} was created with shards={have}, not {self._want}; "
                f"open it with shards={have} (or without shards=), or purge it"
            )
        return have

    async def client(self, slot: int) -> aioredis.Redis:
        return await self._cluster.client(slot)

    def forget(self) -> None:
        self._cluster.forget()

    async def numbers(self, n: int) -> tuple[int, str]:
        key = f"{{{self.prefix}}}:seq"
        client = await self.client(key_slot(key.encode()))
        return int(await client.incrby(key, n)) - n + 1, "seq"

    async def limits(self, max_size: int, counts: Callable[[], Awaitable[list[int]]], hosts: Sequence[str]
                     ) -> dict[int, int]:
        """The room left (from the counts read now) goes to the first requests, in order; each shard may
        fill up to its count plus its share."""
        have = await counts()
        room = max(0, max_size - sum(have))
        share = Counter(self.of(host).number for host in hosts[:room])
        return {k: have[k] + share[k] for k in {self.of(host).number for host in hosts}}

    async def lease_plan(self, limit: int, heads: HeadsFn) -> LeasePlan:
        """Each shard's share of the best ``limit`` of all: a k-way merge of the shards' best (each shard's
        ``LEASE`` of its share picks the same requests, best first). Each shard is asked first for twice its
        even share; a shard all of whose answer is among the best ``limit`` may have more there: it is asked
        again for four times as many (up to ``limit``), until none may."""
        n = len(self.all)
        ask = dict.fromkeys(range(n), min(limit, 2 * -(-limit // n)))
        lists: dict[int, list[tuple[float, int]]] = {}
        full: dict[int, bool] = {}  # the shard gave all it was asked for: it may have more
        failed: BaseException | None = None
        while ask:
            for k, reply in zip(ask, await heads(ask), strict=True):
                if isinstance(reply, BaseException):
                    failed = failed or reply
                    lists.pop(k, None)
                    continue
                lists[k] = [(float(s), k) for s in reply]
                full[k] = len(reply) == ask[k] < limit
            best = list(itertools.islice(heapq.merge(*lists.values()), limit))
            last = best[-1] if len(best) == limit else None
            ask = {
                k: min(limit, 4 * len(lists[k])) for k in lists
                if full[k] and (last is None or lists[k][-1] <= last)
            }
        if not lists and failed is not None:
            raise failed
        return LeasePlan(dict(sorted(Counter(k for _, k in best).items())))

    async def nodes(self) -> list[aioredis.Redis]:
        return await self._cluster.masters()

    def match(self) -> str:
        return f"\\{{{_glob(self.prefix)}[.}}]*"  # {p}:... and {p.k.j}:...

    def key_name(self, key: str) -> str:
        return key.split("}:", 1)[1]

    async def unlink(self, node: aioredis.Redis, keys: list[Any]) -> int:
        """One by one: keys of several slots in one command are refused."""
        pipe = node.pipeline(transaction=False)
        for key in keys:
            pipe.unlink(key)
        return sum(int(n) for n in await pipe.execute())

    async def aclose(self) -> None:
        await self._cluster.aclose()


def _cluster_shards(prefix: str, n: int) -> list[Shard]:
    """The shards of a frontier on a cluster: shard k's hash tag in the k-th of n equal slot slices."""
    out = []
    for k in range(n):
        lo = k * REDIS_CLUSTER_HASH_SLOTS // n
        hi = (k + 1) * REDIS_CLUSTER_HASH_SLOTS // n
        j = 0
        while not lo <= (slot := key_slot(f"{prefix}.{k}.{j}".encode())) < hi:
            j += 1
        out.append(Shard(k, f"{{{prefix}.{k}.{j}}}", slot))
    return out


def _glob(prefix: str) -> str:
    """``prefix`` with glob characters escaped, for SCAN MATCH."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix)
