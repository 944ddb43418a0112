"""The Redis frontier seen from outside: its counters (``stats``, every host's politeness), the entries
moved aside, the memory it uses, and wiping it -- what ``crawlherd frontier stats|purge`` and the
worker's heartbeat ask. Each reads every shard."""

from __future__ import annotations

from collections import Counter
from typing import Any

from crawlherd.clock import Clock
from crawlherd.frontier.base import FrontierStats, HostState
from crawlherd.frontier.redis._codec import text
from crawlherd.frontier.redis._scripts import RedisCalls

__all__ = ["bad_entries", "memory_usage", "purge", "stats"]

_QUEUE_KEYS = ("q:", "gq", "ready", "timers", "delayed", "age", "l:", "lb:", "lexp", "ldet", "h")


async def stats(calls: RedisCalls, clock: Clock) -> FrontierStats:
    """The counters of every shard, summed (``stats.lua``), and every host's state (``hosts.lua``)."""
    c: Counter[str] = Counter()
    hosts: dict[str, int] = {}
    inflight = 0
    oldest: float | None = None
    for counters_flat, shard_inflight, shard_oldest, depth_flat in await calls.on_all("STATS"):
        c.update({text(counters_flat[i]): int(counters_flat[i + 1]) for i in range(0, len(counters_flat), 2)})
        hosts.update({text(depth_flat[i]): int(depth_flat[i + 1]) for i in range(0, len(depth_flat), 2)})
        inflight += int(shard_inflight)
        if o := text(shard_oldest):
            oldest = float(o) if oldest is None else min(oldest, float(o))
    c["duplicates"] = c.pop("dup", 0)  # the scripts' counter name
    return FrontierStats.from_counters(
        c,
        queued=c["queued"],
        in_flight=inflight,
        oldest_queued_age=max(0.0, clock.now() - oldest) if oldest is not None else None,
        hosts=hosts,
        dupefilter_unavailable=c["dfu"],
        host_states=await _host_states(calls, clock),
    )


async def _host_states(calls: RedisCalls, clock: Clock) -> dict[str, HostState]:
    flat = [text(v) for reply in await calls.on_all("HOSTS") for v in reply]
    now = clock.now()
    out: dict[str, HostState] = {}
    for i in range(0, len(flat), 7):
        host, queued, inf, cap, delay, ready_at, blocked = flat[i : i + 7]
        out[host] = HostState(
            queued=int(queued),
            in_flight=max(0, int(inf)),
            max_in_flight=int(cap),
            delay=float(delay),
            ready_in=max(0.0, float(ready_at) - now),
            backoff=max(0.0, float(blocked) - now) if blocked else 0.0,
        )
    return out


async def bad_entries(calls: RedisCalls) -> dict[str, str]:
    """Entries moved aside (``KP:bad`` of each shard): id (``"<shard>/<id>"`` when sharded) ->
    ``"<reason>\\t<payload>"``."""
    shards = calls.shards
    out: dict[str, str] = {}
    for shard in shards.all:

        async def read(slot: int = shard.slot, key: str = f"{shard.kp}:bad") -> Any:
            return await (await shards.client(slot)).hgetall(key)

        raw = await calls.guard(read)
        out.update({shards.token(shard, text(k)): text(v) for k, v in raw.items()})
    return out


async def memory_usage(calls: RedisCalls) -> dict[str, int]:
    """Bytes Redis uses (``MEMORY USAGE``) per kind of key: ``dupefilter``, ``queue`` (requests, queues,
    indexes) and ``other``. Scans the keys: an operator's tool."""
    shards = calls.shards

    async def measure() -> dict[str, int]:
        out = {"dupefilter": 0, "queue": 0, "other": 0}
        for node in await shards.nodes():
            keys = [text(k) async for k in node.scan_iter(match=shards.match(), count=1000)]
            for start in range(0, len(keys), 1000):
                part = keys[start : start + 1000]
                pipe = node.pipeline(transaction=False)
                for key in part:
                    pipe.memory_usage(key, samples=0)
                for key, used in zip(part, await pipe.execute(), strict=True):
                    out[_kind(shards.key_name(key))] += int(used or 0)
        return out

    return await calls.guard(measure)


def _kind(name: str) -> str:
    if name.startswith(("df:", "bloom")):
        return "dupefilter"
    return "queue" if name.startswith(_QUEUE_KEYS) else "other"


async def purge(calls: RedisCalls) -> int:
    """Delete every key of the frontier; how many were deleted."""
    shards = calls.shards

    async def wipe() -> int:
        n = 0
        for node in await shards.nodes():
            batch: list[Any] = []
            async for key in node.scan_iter(match=shards.match(), count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    n += await shards.unlink(node, batch)
                    batch = []
            if batch:
                n += await shards.unlink(node, batch)
        return n

    return await calls.guard(wipe)
