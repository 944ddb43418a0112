"""Where the slots of a Redis Cluster are, for the ``redis+cluster://`` frontier: the cluster's own map
(``CLUSTER SLOTS``, asked of any node it knows), looked up again after an error so that after a failover
the frontier talks to the promoted replica; one plain connection pool per master (a script and its
``WAIT`` go over one connection)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from crawlherd._rediscluster import cluster_address
from crawlherd.frontier.redis._codec import text

__all__ = ["ClusterMap", "no_retry"]

log = logging.getLogger("crawlherd.frontier.redis")

_Range = tuple[int, int, tuple[str, int]]


def no_retry(timeout: float) -> dict[str, Any]:
    """The client settings of every connection the frontier makes: ``timeout`` seconds, no retry by the
    client itself (a lease or an ack must not run twice: the caller retries), and a pool as large as the
    calls at once (redis-py's default of 100 raises "Too many connections" past it: a worker's pages in
    flight, each queueing its detail pages, take more, and that is not an outage)."""
    return {
        "max_connections": 2**31,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "retry_on_error": [],
    }


class ClusterMap:
    """The masters of a cluster by slot; see the module docstring.

    After an error :meth:`forget` makes the next call ask the cluster again. The clients are kept: a
    node still serving slots is talked to over the same pool (redis-py drops a connection that failed),
    and the client of a node the new map leaves out is closed then -- so through an outage of any
    length the frontier holds at most one client per master."""

    def __init__(self, netloc: str, timeout: float) -> None:
        address = cluster_address(netloc)
        self._user = address.username
        self._password = address.password
        self._timeout = timeout
        self._nodes: list[tuple[str, int]] = list(address.nodes)
        self._ranges: list[_Range] | None = None
        self._clients: dict[tuple[str, int], aioredis.Redis] = {}
        self._lock = asyncio.Lock()

    def _connect(self, host: str, port: int) -> aioredis.Redis:
        return aioredis.Redis(
            host=host, port=port, username=self._user, password=self._password, **no_retry(self._timeout)
        )

    def _client(self, addr: tuple[str, int]) -> aioredis.Redis:
        client = self._clients.get(addr)
        if client is None:
            client = self._clients[addr] = self._connect(*addr)
        return client

    async def _map(self) -> list[_Range]:
        async with self._lock:
            if self._ranges is None:
                self._ranges = ranges = await self._find()
                masters = {addr for _, _, addr in ranges}
                for addr in [a for a in self._clients if a not in masters]:
                    await _close_quietly(self._clients.pop(addr))
            return self._ranges

    async def client(self, slot: int) -> aioredis.Redis:
        """A client of the master serving ``slot``."""
        for start, end, addr in await self._map():
            if start <= slot <= end:
                return self._client(addr)
        raise rexc.ConnectionError(f"no node of the cluster serves slot {slot}")

    async def masters(self) -> list[aioredis.Redis]:
        return [self._client(addr) for addr in dict.fromkeys(addr for _, _, addr in await self._map())]

    def forget(self) -> None:
        """Ask the cluster again on the next call (after an error: a failover may have moved a slot)."""
        self._ranges = None

    async def aclose(self) -> None:
        self._ranges = None
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def _find(self) -> list[_Range]:
        errors = []
        for host, port in list(self._nodes):
            probe = self._connect(host, port)
            try:
                ranges = await probe.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            except (rexc.RedisError, OSError) as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            finally:
                await probe.aclose()
            out = []
            for start, end, primary, *replicas in ranges:
                for node in (primary, *replicas):  # learn every node, for the next look-up
                    addr = (text(node[0]) or host, int(node[1]))
                    if addr not in self._nodes:
                        self._nodes.append(addr)
                out.append((int(start), int(end), (text(primary[0]) or host, int(primary[1]))))
            if out:
                return out
            errors.append(f"{host}:{port}: no slots assigned")
        raise rexc.ConnectionError("; ".join(errors) or "no cluster node given")


async def _close_quietly(client: aioredis.Redis) -> None:
    """Close the client of a node that is gone from the map (its errors say nothing new)."""
    try:
        await client.aclose()
    except (rexc.RedisError, OSError):
        log.debug("closing the client of a former cluster master failed", exc_info=True)
