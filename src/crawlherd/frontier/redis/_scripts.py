"""The Redis frontier's Lua scripts -- which fragments of ``frontier/lua/`` make each, loading them, running
one on a shard -- and the one place where redis-py's errors become crawlherd's.

Every script gets ``KEYS[1] = <KP>:cfg`` (it names the slot of the shard's keys) and ``ARGV = [KP, now,
delay, max_in_flight, ...]``. With ``wait_replicas`` a write script is followed by ``WAIT n`` on its
connection; fewer acknowledgements within ``wait_timeout`` raise BackendUnavailableError.

**Errors**: a lost connection, a timeout, and a reply that says the server cannot serve now (``OOM``,
``LOADING``, ``READONLY``, ``BUSY``, ``NOREPLICAS``, ``CLUSTERDOWN``, ``MASTERDOWN``, ``TRYAGAIN``,
``ASK``/``MOVED``) raise :class:`~crawlherd.errors.BackendUnavailableError` (``backend="redis"``,
``role="frontier"``) and make the shards find their servers again; any other error reply is a
:class:`~crawlherd.errors.FrontierError`. The client does not retry by itself (a lease or an ack must not
run twice); the caller retries with back-off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.exceptions as rexc
from redis.commands.core import AsyncScript

from crawlherd._lua import lua_script
from crawlherd.errors import BackendUnavailableError, FrontierError
from crawlherd.frontier.options import FrontierOptions
from crawlherd.frontier.redis._shards import Shard, Shards

__all__ = ["SCRIPTS", "RedisCalls", "unavailable"]

_T = TypeVar("_T")

# The scripts (frontier/lua/*.lua), by name: the fragments each is made of, in order.
SCRIPTS: dict[str, tuple[str, ...]] = {
    "INIT": ("init",),
    "ENQUEUE": ("prelude", "enqueue"),
    "HEADS": ("prelude", "pick", "heads"),
    "LEASE": ("prelude", "pick", "lease"),
    "ACK": ("prelude", "ack"),
    "RETRY": ("prelude", "retry"),
    "BURY": ("prelude", "bury"),
    "ROBOTS": ("prelude", "robots"),
    "BLOCK_HOST": ("prelude", "block_host"),
    "POLICY": ("prelude", "policy"),
    "SEND": ("prelude", "send"),
    "ANSWER": ("prelude", "answer"),
    "RENEW": ("prelude", "renew"),
    "PEEK": ("peek",),
    "STATS": ("stats",),
    "HOSTS": ("hosts",),
}
_READ_ONLY = ("PEEK", "STATS", "HOSTS")  # scripts that write nothing: no WAIT after them

# Replies that say the server cannot serve now, by redis-py's class (MasterDownError is a
# ClusterDownError, MovedError an AskError; LOADING's BusyLoadingError is a ConnectionError) ...
_REFUSALS = (rexc.OutOfMemoryError, rexc.ReadOnlyError, rexc.ClusterDownError, rexc.TryAgainError, rexc.AskError)
# ... and the Redis error codes of such replies redis-py has no class for (the reply's first word).
_REFUSAL_CODES = frozenset({"BUSY", "NOREPLICAS"})
_LOST = (rexc.ConnectionError, rexc.TimeoutError, OSError, TimeoutError)


def unavailable(message: str) -> BackendUnavailableError:
    """The Redis frontier's typed outage."""
    return BackendUnavailableError(message, backend="redis", role="frontier")


class RedisCalls:
    """Runs operations and scripts on the shards of one frontier; see the module docstring."""

    def __init__(self, shards: Shards, options: FrontierOptions, url: str, *, wait: int, wait_timeout: float) -> None:
        self.shards = shards
        self.closed = False
        self._options = options
        self._url = url
        self._wait = wait
        self._wait_ms = max(1, int(wait_timeout * 1000))
        self._scripts: dict[str, AsyncScript] = {
            name: AsyncScript(None, lua_script("crawlherd.frontier", *parts).encode())  # type: ignore[arg-type]
            for name, parts in SCRIPTS.items()
        }

    async def guard(self, op: Callable[[], Awaitable[_T]]) -> _T:
        """Run one Redis operation, mapping the driver's errors (the one place that does)."""
        if self.closed:
            raise FrontierError("the redis frontier is closed")
        try:
            return await op()
        except _LOST as exc:
            self.shards.forget()
            raise unavailable(f"redis frontier at {self._url} is unavailable: {exc}") from exc
        except rexc.ResponseError as exc:
            code = exc.status_code or str(exc).split(" ", 1)[0]
            if isinstance(exc, _REFUSALS) or code in _REFUSAL_CODES:
                self.shards.forget()
                said = str(exc) if str(exc).startswith(code) else f"{code} {exc}"
                raise unavailable(f"redis at {self._url} refused: {said}") from exc
            raise FrontierError(f"redis frontier script failed: {exc}") from exc

    async def run(self, shard: Shard, name: str, *args: Any) -> Any:
        """Script ``name`` on ``shard`` (followed by ``WAIT`` when ``wait_replicas`` asks for it)."""
        opts = self._options
        argv = [shard.kp, repr(opts.clock.now()), repr(float(opts.delay)), opts.max_in_flight, *args]
        script = self._scripts[name]
        keys = [f"{shard.kp}:cfg"]  # not used by the scripts: it names the slot of the keys

        async def call() -> Any:
            client = await self.shards.client(shard.slot)
            if not self._wait or name in _READ_ONLY:
                return await script(keys=keys, args=argv, client=client)
            # the script and WAIT on one connection: WAIT counts the replicas that have this client's writes
            async with client.pipeline(transaction=False) as pipe:
                await script(keys=keys, args=argv, client=pipe)
                pipe.execute_command("WAIT", self._wait, self._wait_ms)
                reply, acked = await pipe.execute()
            if int(acked) < self._wait:
                raise unavailable(
                    f"redis frontier at {self._url}: {name.lower()} reached {int(acked)} of the {self._wait} "
                    f"replica(s) wait_replicas asks for within {self._wait_ms} ms; it may be lost in a failover "
                    "(an enqueue may be repeated: duplicates are filtered)"
                )
            return reply

        return await self.guard(call)

    async def fan(self, calls: Sequence[tuple[Shard, str, Sequence[Any]]]) -> list[Any]:
        """Several scripts (on several shards) at once; each result, or the exception it raised."""
        if len(calls) == 1:
            shard, name, args = calls[0]
            try:
                return [await self.run(shard, name, *args)]
            except (BackendUnavailableError, FrontierError) as exc:
                return [exc]
        runs = (self.run(shard, name, *args) for shard, name, args in calls)
        return list(await asyncio.gather(*runs, return_exceptions=True))

    async def on_all(self, name: str, *args: Any) -> list[Any]:
        """Script ``name`` on every shard; the replies, or the first error raised."""
        replies = await self.fan([(shard, name, args) for shard in self.shards.all])
        raise_first(replies)
        return replies


def raise_first(replies: Sequence[Any]) -> None:
    """Raise the first exception among ``replies``."""
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
