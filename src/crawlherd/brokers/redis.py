"""``redis://host:port/db?prefix=crawlherd``: a broker on Redis Streams with a consumer group.

Keys (``stream`` defaults to ``<prefix>:jobs``; ``?stream=`` names it outright):

- ``<stream>``: the stream; one entry per message (fields ``k`` key, ``b`` body, ``h`` headers as JSON,
  ``n`` earlier deliveries). Consumers read it through the consumer group ``group`` (created with
  ``MKSTREAM`` from id ``0``, so nothing published before the first consumer is missed).
- ``<stream>:dead``: the dead-letter stream (the message's fields plus ``r`` reason and ``t`` time, ms).
- ``<stream>:delayed`` (sorted set, score = due time in ms on the **Redis server's clock**) and
  ``<stream>:delayed:data`` (hash): delayed messages. Consumers move the due ones into the stream with
  a Lua script, atomically.

Guarantees: ``publish`` returns once Redis replied to the XADD (durability is then the server's
persistence settings: use AOF with ``appendfsync everysec`` or ``always`` to survive a Redis crash).
Delivery is at least once: an entry stays in the group's pending list until acked, and a consumer
that died (or holds an entry longer than ``claim_idle``) loses it to ``XAUTOCLAIM`` by any live
consumer, which delivers it again with ``redelivered=True``. Ack, nack, retry and dead-letter are Lua
scripts (``brokers/lua/*.lua``): ``XACK`` (refused when the entry was settled already) plus ``XDEL``
plus the re-publish, in one step, so a message is never both lost and live twice. Acked entries are
deleted from the stream.

Options (URL query or keywords): :class:`RedisBrokerOptions`. ``client=``: a live ``redis.asyncio.Redis``
or ``RedisCluster`` (``decode_responses=False``) to use instead of opening one; it is not closed by
:meth:`close`.

Redis Cluster
-------------
``redis+cluster://[user:password@]host:port,host:port/?prefix=crawlherd`` (the same options; any one
reachable node is enough to start from): the broker talks to the cluster through redis-py's
``RedisCluster``, which follows the cluster's slot map (and finds a promoted replica after a failover).
Every key of one queue carries the queue's name as its hash tag -- ``{<prefix>:jobs}``,
``{<prefix>:jobs}:dead``, ``{<prefix>:jobs}:delayed``, ``{<prefix>:jobs}:delayed:data`` (``?stream=``
names the part in braces) -- so the queue lives in one hash slot: each Lua script above touches one slot
and stays atomic, and a pipelined ``publish_many`` is one round trip to one master. Different queues
(prefixes) land on different masters; one queue is served by one master (scale by queues, not within one).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError, RedisClusterException, RedisError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from crawlherd._lua import lua_script
from crawlherd._options import Delay, NonEmpty, Seconds
from crawlherd._redact import redact_url
from crawlherd._rediscluster import ClusterAddress, cluster_address
from crawlherd.brokers._common import (
    BrokerBase,
    BrokerOptions,
    build_options,
    check_delay,
    check_publish,
    log,
    new_id,
    unavailable,
)
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.errors import BackendUnavailableError, BrokerError, ConfigurationError, PublishError

__all__ = ["RedisBroker", "RedisBrokerOptions"]

T = TypeVar("T")

_Client = aioredis.Redis | RedisCluster

# The scripts (brokers/lua/*.lua), by name: the fragments each is made of, in order.
_SCRIPTS: dict[str, tuple[str, ...]] = {
    "delay": ("now_ms", "delay"),
    "promote": ("now_ms", "promote"),
    "ack": ("take", "ack"),
    "requeue": ("take", "requeue"),
    "retry": ("now_ms", "take", "retry"),
    "dead": ("now_ms", "take", "dead"),
    "requeue_dead": ("requeue_dead",),
    "touch": ("touch",),
}

_STREAM_ID = re.compile(r"^\d+-\d+$")

# Redis could not be reached or cannot serve the keys now: the cluster ones are no node reachable and
# slots not served (a failover under way).
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError, RedisClusterException, ClusterDownError,
                TryAgainError)


def reply_code(exc: BaseException) -> str:
    """The error code of a Redis error reply (``NOGROUP``, ``BUSYGROUP``, ``WRONGTYPE``...): its first word.
    Redis's protocol puts the code there; redis-py maps a few codes to exception classes
    (``NOSCRIPT``, ``READONLY``...) but not the Streams ones, whose replies it raises as a plain
    ``ResponseError`` keeping the code in the message."""
    if not isinstance(exc, ResponseError):
        return ""
    # In a pipeline, redis-py puts "Command # N (...) of pipeline caused error: " before the reply.
    return str(exc).rpartition("of pipeline caused error: ")[2].lstrip("('\"").split(" ", 1)[0]


class GroupMissingError(BrokerError):
    """The stream's consumer group is gone (``NOGROUP``: the stream was deleted under the broker)."""


@contextmanager
def _driver_errors(broker: RedisBroker, *, publishing: bool = False) -> Iterator[None]:
    """redis-py's errors as crawlherd's: the one place the Redis broker decides what is an outage."""
    try:
        yield
    except _UNREACHABLE as exc:
        raise unavailable(f"{broker!r}: Redis cannot be reached: {redact_url(str(exc))}", backend="redis") from exc
    except ResponseError as exc:
        if reply_code(exc) == "NOGROUP":
            raise GroupMissingError(f"{broker!r}: {exc}") from exc
        raise (PublishError if publishing else BrokerError)(f"{broker!r}: {exc}") from exc
    except RedisError as exc:
        raise (PublishError if publishing else BrokerError)(f"{broker!r}: {exc}") from exc


@dataclass(frozen=True)
class RedisBrokerOptions(BrokerOptions):
    """``prefix`` of the keys; ``stream`` (default ``<prefix>:jobs``; on a Redis Cluster the broker puts it
    in braces, the hash tag of all the queue's keys, and refuses braces of one's own); the consumer
    ``group``; this broker object's ``consumer`` name (default: unique per broker object);
    ``claim_idle`` seconds an entry may stay unsettled before another consumer claims it (a worker
    extends it every third of that while it works on a message, see ``touch``); ``claim_interval`` how
    often to look for such entries (0: ``claim_idle / 3``: a dead consumer's entries come back within
    ``4/3 claim_idle``); ``block`` the longest ``XREADGROUP`` wait;
    ``connect_timeout``; ``socket_timeout`` (longer than ``block``). A message delivered
    ``max_deliveries`` times without being settled -- claimed from dead consumers, or nacked back -- is
    dead-lettered."""

    backend = "redis"
    shorter_than = (("block", "socket_timeout"),)

    prefix: NonEmpty = "crawlherd"
    stream: str | None = None
    group: NonEmpty = "crawlherd"
    consumer: str | None = None
    claim_idle: Seconds = 15.0
    claim_interval: Delay = 0.0
    block: Seconds = 1.0
    connect_timeout: Seconds = 5.0
    socket_timeout: Seconds = 10.0


class _ConsumeState:
    __slots__ = ("cursor", "next_claim")

    def __init__(self) -> None:
        self.cursor = "0-0"
        self.next_claim = 0.0


class RedisBroker(BrokerBase):
    """A broker on Redis Streams; see the module docstring."""

    backend = "redis"
    lease_option = "claim_idle"

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, client: _Client | None = None,
                 options: RedisBrokerOptions | None = None) -> None:
        super().__init__()
        self.options = opts = options or RedisBrokerOptions()
        parts = urlsplit(url)
        self._url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        name = opts.stream or f"{opts.prefix}:jobs"
        self._cluster: ClusterAddress | None = None
        if parts.scheme.endswith("+cluster") and parts.scheme != "redis+cluster":
            raise ConfigurationError(f"redis broker {redact_url(url)!r}: only redis+cluster:// is supported for a "
                                     "cluster (no TLS to a cluster yet)")
        if parts.scheme == "redis+cluster" or isinstance(client, RedisCluster):
            if "{" in name or "}" in name:
                raise ConfigurationError(f"redis+cluster broker: the queue name {name!r} must not contain braces "
                                         "(the broker makes it the hash tag of the queue's keys itself)")
            if parts.path.strip("/") not in ("", "0"):
                raise ConfigurationError(f"redis+cluster broker {redact_url(url)!r}: a cluster has database 0 only")
            if client is None:
                try:
                    self._cluster = cluster_address(parts.netloc)
                except ValueError as exc:
                    raise ConfigurationError(f"bad redis+cluster broker URL {redact_url(url)!r}: {exc}") from None
            name = f"{{{name}}}"
        self.stream = name
        self.dead_stream = f"{self.stream}:dead"
        self._delayed = f"{self.stream}:delayed"
        self._delayed_data = f"{self.stream}:delayed:data"
        self.group = opts.group
        self.consumer = opts.consumer or f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        self._given_client = client
        self._client: _Client | None = None
        if client is not None and client.get_encoder().decode_responses:
            raise ConfigurationError("redis broker: the client must be created with decode_responses=False")

    @classmethod
    def from_url(cls, url: str, *, client: _Client | None = None, **options: Any) -> RedisBroker:
        return cls(url, client=client, options=build_options(RedisBrokerOptions, url, options, backend="redis"))

    # -- plumbing ----------------------------------------------------------------------------------

    def _describe(self) -> str:
        return f"{redact_url(self._url)} stream={self.stream!r}"

    @property
    def client(self) -> _Client:
        return cast("_Client", self._live(self._client))

    async def _call(self, fn: Callable[[_Client], Awaitable[T]], *, publishing: bool = False) -> T:
        if not self._opened:
            await self._ensure_open()
        try:
            with _driver_errors(self, publishing=publishing):
                return await fn(self.client)
        except GroupMissingError:
            await self._create_group()  # for the next call
            raise

    async def _create_group(self) -> None:
        try:
            with _driver_errors(self):
                await self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except BrokerError as exc:
            if reply_code(exc.__cause__ or exc) != "BUSYGROUP":  # BUSYGROUP: it exists already
                raise

    async def _open(self) -> None:
        opts = self.options
        client: _Client
        retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2)
        if self._given_client is not None:
            client = self._given_client
        elif self._cluster is not None:
            client = RedisCluster(
                startup_nodes=[ClusterNode(host, port) for host, port in self._cluster.nodes],
                username=self._cluster.username, password=self._cluster.password,
                socket_connect_timeout=opts.connect_timeout, socket_timeout=opts.socket_timeout,
                retry=retry, decode_responses=False, max_connections=2**31,  # unbounded, as a Redis pool
            )
        else:
            # a pool as large as the calls at once: redis-py's default of 100 raises "Too many connections"
            # past it, which is no outage (a worker's slots settling together, a consumer acking as it goes)
            client = aioredis.Redis.from_url(
                self._url, socket_connect_timeout=opts.connect_timeout, socket_timeout=opts.socket_timeout,
                retry=retry, decode_responses=False, max_connections=2**31,
            )
        self._client = client
        self._scripts = {name: client.register_script(lua_script("crawlherd.brokers", *parts))
                         for name, parts in _SCRIPTS.items()}
        try:
            await self._create_group()
        except BaseException:
            await self._shutdown()
            raise

    async def _shutdown(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        if self._opened:
            try:  # forget our consumer in the group when it holds nothing (we read no more)
                with _driver_errors(self):
                    info = await client.xpending_range(self.stream, self.group, "-", "+", 1,
                                                       consumername=self.consumer)
                    if not info:
                        await client.xgroup_delconsumer(self.stream, self.group, self.consumer)
            except (BrokerError, BackendUnavailableError) as exc:
                log.debug("%r: could not remove consumer %s: %s", self, self.consumer, exc)
        if client is not self._given_client:
            await client.aclose()

    async def _script(self, name: str, keys: list[str], args: list[Any], *, publishing: bool = False) -> Any:
        script = self._scripts[name]
        return await self._call(lambda c: script(keys=keys, args=args, client=c), publishing=publishing)

    # -- protocol ----------------------------------------------------------------------------------

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        hdrs = check_publish(body, key, headers, delay)
        h = json.dumps(hdrs) if hdrs else ""
        if delay > 0:
            await self._script("delay", [self._delayed, self._delayed_data],
                               [new_id(), max(1, round(delay * 1000)), key, bytes(body), h, ""], publishing=True)
            return
        fields: dict[str | bytes, bytes | str] = {"k": key, "b": bytes(body)}
        if h:
            fields["h"] = h
        await self._call(lambda c: c.xadd(self.stream, fields), publishing=True)  # type: ignore[arg-type]

    async def publish_many(
        self, messages: Sequence[tuple[bytes, str, Mapping[str, str] | None]]
    ) -> list[Exception | None]:
        """Publish each ``(body, key, headers)`` (no delay) in one pipelined round trip; per message,
        in order, None (Redis replied to its XADD) or the error. An outage raises for the whole batch."""
        entries: list[dict[str | bytes, bytes | str]] = []
        encoded: tuple[object, str] = (None, "")  # the last headers and their JSON (a relay's are all one)
        for body, key, headers in messages:
            hdrs = check_publish(body, key, headers, 0.0)
            fields: dict[str | bytes, bytes | str] = {"k": key, "b": bytes(body)}
            if hdrs:
                if encoded[0] is not headers:
                    encoded = (headers, json.dumps(hdrs))
                fields["h"] = encoded[1]
            entries.append(fields)

        async def send(c: _Client) -> list[Any]:
            async with c.pipeline(transaction=False) as pipe:
                for entry in entries:
                    pipe.xadd(self.stream, entry)  # type: ignore[arg-type]
                return await pipe.execute(raise_on_error=False)

        replies = await self._call(send, publishing=True)
        return [PublishError(f"{self!r}: {r}") if isinstance(r, Exception) else None for r in replies]

    def _delivery(self, entry_id: bytes | str, fields: Mapping[bytes, bytes], claimed: bool) -> Delivery:
        eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        h = fields.get(b"h")
        n = int(fields.get(b"n", b"0"))
        return Delivery(fields.get(b"b", b""), fields.get(b"k", b"").decode(), eid, claimed or n > 0,
                        json.loads(h) if h else {}, raw=fields)

    async def _start_consume(self, session: Any) -> _ConsumeState:
        return _ConsumeState()

    async def _fetch(self, state: _ConsumeState, n: int) -> Sequence[Delivery]:
        opts = self.options
        claim_interval = opts.claim_interval or opts.claim_idle / 3
        now = time.monotonic()
        if now >= state.next_claim:
            state.next_claim = now + claim_interval
            try:
                res: Any = await self._call(lambda c: c.xautoclaim(
                    self.stream, self.group, self.consumer, int(opts.claim_idle * 1000), state.cursor, count=n))
            except GroupMissingError:
                state.cursor = "0-0"
                return []  # a Redis that came back empty: the group is created again, nothing to claim
            cursor = res[0].decode() if isinstance(res[0], bytes) else str(res[0])
            state.cursor = cursor
            if cursor != "0-0":
                state.next_claim = now  # more to look at
            claimed = [self._delivery(eid, f, True) for eid, f in res[1]
                       if f is not None and self._id(eid) not in self._outstanding
                       and self._id(eid) not in self._settling_ids]  # (its own settle is on its way)
            claimed = await self._drop_poison(claimed, claimed=True)
            if claimed:
                return claimed
        _, next_due = await self._script("promote", [self._delayed, self._delayed_data, self.stream], [100])
        block_ms = int(opts.block * 1000)
        if next_due >= 0:
            block_ms = min(block_ms, int(next_due))
        block_ms = max(1, min(block_ms, int((state.next_claim - time.monotonic()) * 1000)))
        try:
            read: Any = await self._call(lambda c: c.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=n, block=block_ms))
        except GroupMissingError:
            return []  # the stream was deleted under us; the group was created again
        if not read:
            return []
        entries = read[0][1] if isinstance(read, list) else next(iter(read.values()))[0]
        return await self._drop_poison([self._delivery(eid, f, False) for eid, f in entries if f], claimed=False)

    def _pending_entry(self, entry_id: str) -> Callable[[_Client], Awaitable[Any]]:
        return lambda c: c.xpending_range(self.stream, self.group, entry_id, entry_id, 1)

    async def _drop_poison(self, deliveries: list[Delivery], *, claimed: bool) -> list[Delivery]:
        """With ``max_deliveries``: dead-letter the deliveries whose message was delivered that many times
        already without being settled (earlier requeues, field ``n``, plus earlier claims/reads of this
        entry, from the pending list)."""
        limit = self.options.max_deliveries
        if not limit:
            return deliveries
        keep = []
        for d in deliveries:
            earlier = int(d.raw.get(b"n", b"0"))
            if claimed:
                info: Any = await self._call(self._pending_entry(d.delivery_id))
                earlier += max(0, int(info[0]["times_delivered"]) - 1) if info else 0
            if earlier >= limit:
                why = f"delivered {earlier} times without being settled"
                args = [self.group, d.delivery_id, self.consumer, why]
                await self._script("dead", [self.stream, self.dead_stream], args)
            else:
                keep.append(d)
        return keep

    @staticmethod
    def _id(eid: bytes | str) -> str:
        return eid.decode() if isinstance(eid, bytes) else eid

    async def _settle(self, delivery: Delivery, name: str, keys: list[str], args: list[Any]) -> None:
        await self._settle_with(
            delivery,
            lambda: self._script(name, keys, [self.group, delivery.delivery_id, self.consumer, *args]),
            f"entry {delivery.delivery_id} (key {delivery.key!r}) was settled already (by this consumer, or "
            f"by another one that claimed it after claim_idle={self.options.claim_idle} s)",
        )

    async def _touch(self, delivery: Delivery) -> None:
        # XCLAIM to ourselves resets the entry's idle time (JUSTID: without counting a delivery); only
        # while we still own it -- checked in the same script, so a claim lost to another consumer is
        # never taken back
        eid = delivery.delivery_id
        if not await self._script("touch", [self.stream], [self.group, eid, self.consumer]):
            raise BrokerError(f"entry {eid} (key {delivery.key!r}): the claim was lost before it was extended")

    async def ack(self, delivery: Delivery) -> None:
        await self._settle(delivery, "ack", [self.stream], [])

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        if not requeue:
            await self.dead_letter(delivery, "nacked")
            return
        await self._settle(delivery, "requeue", [self.stream], [])

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        check_delay(delay)
        if body is not None:
            check_publish(body, delivery.key, None, delay)
        delay_ms = max(1, round(delay * 1000)) if delay > 0 else 0
        await self._settle(delivery, "retry", [self.stream, self._delayed, self._delayed_data],
                           [new_id(), delay_ms, "0" if body is None else "1", b"" if body is None else bytes(body)])

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        await self._settle(delivery, "dead", [self.stream, self.dead_stream], [reason])

    async def _release(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            await self._script("requeue", [self.stream], [self.group, d.delivery_id, self.consumer])

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        entries: Any = await self._call(lambda c: c.xrange(self.dead_stream, "-", "+", count=limit))
        out = []
        for eid, f in entries:
            h = f.get(b"h")
            out.append(DeadLetter(f.get(b"b", b""), f.get(b"k", b"").decode(), f.get(b"r", b"").decode(),
                                  self._id(eid), int(f.get(b"t", b"0")) / 1000, json.loads(h) if h else {}))
        return out

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        if dead_id is not None:
            if not _STREAM_ID.match(dead_id):
                return 0
            return int(await self._script("requeue_dead", [self.dead_stream, self.stream], [dead_id, 1]))
        total = 0
        while moved := int(await self._script("requeue_dead", [self.dead_stream, self.stream], ["", 500])):
            total += moved
        return total

    async def pending(self) -> int:
        async def count(c: _Client) -> int:
            async with c.pipeline(transaction=True) as pipe:
                pipe.xlen(self.stream)
                pipe.xpending(self.stream, self.group)
                length, summary = await pipe.execute(raise_on_error=False)
            if isinstance(summary, ResponseError) and reply_code(summary) == "NOGROUP":
                return int(length)  # no group (a Redis that came back empty): nothing was delivered
            if isinstance(summary, BaseException):
                raise summary
            return int(length) - int(summary["pending"])

        return await self._call(count)


if TYPE_CHECKING:
    _conforms: type[Broker] = RedisBroker
