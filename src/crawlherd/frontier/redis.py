"""``redis://``: a frontier shared by any number of worker processes on any number of machines.

``open_scheduler("redis://127.0.0.1:6379/0?prefix=mycrawl")``. Every multi-step operation (enqueue
with its duplicate check, lease with politeness, ack, retry, expiry and reclaim) is one Lua script, so
it is atomic: two workers never take the same request, never both pass a host's delay, and a
fingerprint is recorded exactly when its request is queued. The scripts are ``frontier/lua/*.lua``.

- **Politeness shared by all workers**: host ready times and in-flight counts live in Redis.
- **Round trips shared by concurrent callers**: the ``next_request``, ``ack``/``fail`` and
  ``stamp_send`` calls (and the waiters' peeks) made while one of their kind is out go together in
  the next script call (:class:`~crawlherd._aio.Batcher`); each caller gets its own answer.
- **Leases** expire (``lease_timeout``); the next lease call of any worker returns an expired lease's
  request to its queue, so a worker that died loses nothing.
- **Duplicate filter**: ``exact`` stores each 64-bit fingerprint in one of ``2**bits`` small sets
  (``P:df:<fp & mask>`` holding ``fp >> bits``), which Redis keeps intset-encoded: about 9 bytes
  per fingerprint instead of the ~88 of a set of hex SHA1 strings. ``bloom`` is a scalable Bloom
  filter in Redis bit strings (``error_rate``, ``capacity``).
- **Serialisation**: a request is one packed member of its host's queue, ``"<id>\\t<batch>\\t<body>"``;
  the body is ``"<priority> <depth> <url>"`` for a plain GET, else the JSON of
  :meth:`Request.to_record` (it carries a version field); never pickle. An entry that cannot be read is
  moved to ``P:bad`` with its reason and logged, and the frontier goes on.
- **Redis going away**: every operation raises :class:`~crawlherd.errors.BackendUnavailableError`.
  The client does not retry scripts by itself (a lease or an ack must not run twice); the caller
  retries with backoff. An ack retried after such an error may find the lease already settled
  (:class:`~crawlherd.errors.LeaseError`). Nothing queued or leased is lost when Redis comes back,
  provided Redis persists its data (AOF, ``appendfsync everysec`` or ``always``).
- ``dupefilter_unavailable``: ``fail`` (default) raises BackendUnavailableError when the filter's
  keys cannot be used (e.g. a foreign key sits where a bucket should be); ``allow`` queues the
  request unfiltered and counts it in ``stats().dupefilter_unavailable``.

Options of this backend (besides the common ones): ``prefix`` (key namespace, default
``crawlherd``), ``client`` (a live ``redis.asyncio.Redis``; not closed by the frontier),
``wait_replicas`` (default 0: every write script followed by ``WAIT n`` on its connection; fewer
acknowledgements within ``wait_timeout`` seconds, default 1, raise BackendUnavailableError),
``poll_interval`` (seconds between looks for other workers' changes while waiting, default 0.2),
``socket_timeout`` (seconds, default 10), ``dupefilter_bits`` (log2 of the exact filter's set count;
default from ``capacity``, about 200 fingerprints per set, fixed when the frontier is created),
``shards`` (``redis+cluster://`` only; see below).

Key layout
----------
A frontier is made of **shards**; a shard is one complete frontier of layout 2 (the keys listed at the
top of ``frontier/lua/prelude.lua``: per-host queues ``q:<host>``, the ``ready`` and ``timers`` host
indexes, ``delayed``, ``lease``/``lexp``/``att``, host states ``h``, policies ``pdelay``/``pcap``,
counters ``c``, ``cfg``, the duplicate filter ``df:<n>`` or ``bloom``, ``bad``, serials) under a key
prefix ``KP``; every script runs on one shard and touches only its keys. A host belongs to exactly one
shard (``crc32(host) % shards``), and so do its requests, its politeness state and the fingerprints of
its requests (a fingerprint's URL names its host): dedup with enqueue, politeness and leases stay one
atomic script per shard.

- ``redis://`` (one Redis): one shard, ``KP`` = the prefix (``mycrawl:q:<host>``, ...).
- ``redis+cluster://host:port,host:port?prefix=p&shards=12``: ``shards`` shards (default 12, or the
  number the frontier was created with), shard ``k``'s ``KP`` the hash tag ``{p.k.j}``, ``j`` the first
  number that puts the tag's slot in the ``k``-th of ``shards`` equal slices of the 16,384 slots -- so
  the shards spread evenly over masters that hold equal slot ranges, and all of a shard's keys are in
  one slot. Besides the shards: ``{p}:shards`` (STRING, the shard count, fixed at creation) and
  ``{p}:seq`` (STRING, the request counter the shards share, so that FIFO among equal priorities holds
  across shards). A lease asks every shard for its best ready heads (``TOP``), then leases from each as
  many as it has among the best ``limit`` of all (in parallel), and merges them by queue score; ack and
  retry go to the shard named in the lease token (``"<shard>/<token>"``). ``max_size`` is checked
  against the shards' counts read just before each batch: concurrent enqueuers may pass it by at most
  their batches. The frontier talks to the master of each shard's slot (found with ``CLUSTER SLOTS``)
  and finds it again after a failover.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import math
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from crawlherd._lua import lua_script
from crawlherd._redact import redact_url
from crawlherd._rediscluster import cluster_address
from crawlherd._resilience import Batcher
from crawlherd.errors import (
    BackendUnavailableError,
    ConfigurationError,
    FrontierError,
    LeaseError,
)
from crawlherd.frontier._waiting import WaitingMixin
from crawlherd.frontier.base import FrontierStats, HostState, Lease
from crawlherd.frontier.dupefilter import fp_to_int
from crawlherd.frontier.options import FrontierOptions
from crawlherd.request import Request

__all__ = ["RedisFrontier"]

log = logging.getLogger(__name__)

LAYOUT_VERSION = "2"
_PRIO_LIMIT = (1 << 18) - 1  # scores are -prio * 2**34 + seq: exact in a double for |prio| < 2**18
_BATCH = 500
_DEFAULT_SHARDS = 12  # spreads evenly over 1, 2, 3, 4, 6 or 12 masters
# Replies that say the server cannot serve now (redis-py's classes; MasterDownError is a ClusterDownError,
# MovedError an AskError), and the error codes of such replies redis-py has no class for.
_REFUSALS = (rexc.OutOfMemoryError, rexc.ReadOnlyError, rexc.ClusterDownError, rexc.TryAgainError, rexc.AskError)
_REFUSAL_CODES = ("BUSY", "NOREPLICAS")
_T = TypeVar("_T")
_READ_ONLY = ("PEEK", "STATS", "HOSTS")  # scripts that write nothing: no WAIT after them

# The scripts (frontier/lua/*.lua), by name: the fragments each is made of, in order.
_SCRIPTS: dict[str, tuple[str, ...]] = {
    "INIT": ("init",),
    "ENQUEUE": ("prelude", "enqueue"),
    "TOP": ("prelude", "top"),
    "LEASE": ("prelude", "lease"),
    "ACK": ("prelude", "ack"),
    "RETRY": ("prelude", "retry"),
    "BURY": ("prelude", "bury"),
    "ROBOTS": ("prelude", "robots"),
    "BLOCK_HOST": ("prelude", "block_host"),
    "POLICY": ("prelude", "policy"),
    "SEND": ("prelude", "send"),
    "PEEK": ("peek",),
    "STATS": ("stats",),
    "HOSTS": ("hosts",),
}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


class _Shard(NamedTuple):
    """One shard: its number, the prefix of its keys and their slot (0 outside a cluster)."""

    number: int
    kp: str
    slot: int


def _cluster_shards(prefix: str, n: int) -> list[_Shard]:
    """The shards of a frontier on a cluster: shard k's hash tag in the k-th of n equal slot slices."""
    out = []
    for k in range(n):
        lo = k * REDIS_CLUSTER_HASH_SLOTS // n
        hi = (k + 1) * REDIS_CLUSTER_HASH_SLOTS // n
        j = 0
        while not lo <= (slot := key_slot(f"{prefix}.{k}.{j}".encode())) < hi:
            j += 1
        out.append(_Shard(k, f"{{{prefix}.{k}.{j}}}", slot))
    return out


class _Buried(NamedTuple):
    """A leased entry that could not be decoded: moved aside (BURY) by the caller."""

    shard: _Shard
    token: str
    payload: bytes
    reason: str


class RedisFrontier(WaitingMixin):
    """A frontier in Redis; see the module docstring. Create it with :func:`open_scheduler` or
    :meth:`from_url`, or pass a live client: ``RedisFrontier(client, prefix="crawl")``."""

    def __init__(
        self,
        client: aioredis.Redis | None,
        options: FrontierOptions | None = None,
        *,
        prefix: str = "crawlherd",
        poll_interval: float = 0.2,
        dupefilter_bits: int | None = None,
        owns_client: bool = False,
        url: str = "redis://",
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        cluster: _ClusterMap | None = None,
        shards: int | None = None,
    ) -> None:
        if not prefix or any(c.isspace() for c in prefix):
            raise ConfigurationError(f"redis frontier prefix {prefix!r} must be non-empty, without spaces")
        if not poll_interval > 0:
            raise ConfigurationError(f"poll_interval={poll_interval!r} must be > 0 seconds")
        if dupefilter_bits is not None and not 0 <= dupefilter_bits <= 24:
            raise ConfigurationError(f"dupefilter_bits={dupefilter_bits!r} must be between 0 and 24")
        if not 0 <= wait_replicas <= 16:
            raise ConfigurationError(f"wait_replicas={wait_replicas!r} must be between 0 and 16")
        if not wait_timeout > 0:
            raise ConfigurationError(f"wait_timeout={wait_timeout!r} must be > 0 seconds")
        if cluster is None:
            if client is None:
                raise ConfigurationError("a redis frontier needs a client (or a redis+cluster:// URL)")
            if shards not in (None, 1):
                raise ConfigurationError(
                    f"shards={shards!r}: a redis:// frontier has one shard; shards are for redis+cluster://"
                )
        else:
            if "{" in prefix or "}" in prefix:
                raise ConfigurationError(f"redis+cluster frontier prefix {prefix!r} must not contain braces")
            if shards is not None and not 1 <= shards <= 1024:
                raise ConfigurationError(f"shards={shards!r} must be between 1 and 1024")
        self.options = opts = options or FrontierOptions()
        self.prefix = prefix
        self._cluster = cluster
        self._want_shards = shards
        # outside a cluster: one shard whose keys start with the prefix; on a cluster, known at _init
        self._shards: list[_Shard] = [_Shard(0, prefix, 0)]
        self._wait = wait_replicas
        self._wait_ms = max(1, int(wait_timeout * 1000))
        self._client = client
        self._owns_client = owns_client
        self._url = redact_url(url)
        self._clock = opts.clock
        self._poll = poll_interval
        if dupefilter_bits is None:
            dupefilter_bits = min(24, max(4, math.ceil(math.log2(max(opts.capacity, 16) / 200))))
        self._bits = dupefilter_bits
        self._kind = opts.dupefilter
        self._scripts: dict[str, AsyncScript] = {
            name: AsyncScript(None, lua_script("crawlherd.frontier", *parts).encode())  # type: ignore[arg-type]
            for name, parts in _SCRIPTS.items()
        }
        self._ready = False
        self._closed = False
        self._changed: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        # Many slots lease, ack and peek at once (a page loop): the calls made while one round trip is
        # out share the next one -- one LEASE for n leases, one ACK for n settles, one PEEK for all.
        self._leases: Batcher[None, Lease | None] = Batcher(
            self._lease_for, max_batch=_BATCH, orphan=self._give_back, name="crawlherd-redis-lease"
        )
        self._settles: Batcher[tuple[str, Lease], None] = Batcher(
            self._settle_for, max_batch=_BATCH, name="crawlherd-redis-settle"
        )
        self._sends: Batcher[tuple[str, float], float] = Batcher(
            self._send_for, max_batch=_BATCH, name="crawlherd-redis-send"
        )
        self._peeking: asyncio.Future[tuple[int, int, float | None]] | None = None

    @classmethod
    def from_url(cls, url: str = "redis://127.0.0.1:6379/0", **options: Any) -> RedisFrontier:
        opts, own = FrontierOptions.build(
            url,
            options,
            extra={
                "prefix": str,
                "client": aioredis.Redis,
                "poll_interval": float,
                "socket_timeout": float,
                "dupefilter_bits": int | None,
                "wait_replicas": int,
                "wait_timeout": float,
                "shards": int | None,
            },
        )
        timeout = own.pop("socket_timeout", 10.0)
        client = own.pop("client", None)
        owns = client is None
        parts = urlsplit(url)
        cluster = None
        if parts.scheme == "redis+cluster":
            if client is not None:
                raise ConfigurationError("a redis+cluster:// frontier makes its own connections: drop client=")
            try:
                cluster = _ClusterMap(parts.netloc, timeout)
            except ValueError as exc:
                raise ConfigurationError(f"bad redis+cluster URL {redact_url(url)!r}: {exc}") from None
        elif client is None:
            try:
                client = aioredis.Redis.from_url(
                    urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
                    socket_timeout=timeout,
                    socket_connect_timeout=timeout,
                    retry=Retry(NoBackoff(), 0),
                    retry_on_error=[],
                )
            except ValueError as exc:
                raise ConfigurationError(f"bad redis URL {redact_url(url)!r}: {exc}") from None
        return cls(client, opts, owns_client=owns, url=url, cluster=cluster, **own)

    async def __aenter__(self) -> RedisFrontier:
        try:
            await self._init()
        except BaseException:
            await self.close()  # a failed open keeps nothing open
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<RedisFrontier {self._url} prefix={self.prefix!r} shards={len(self._shards)}>"

    # -- plumbing ----------------------------------------------------------------------------------

    async def _client_for(self, slot: int) -> aioredis.Redis:
        if self._cluster is not None:
            return await self._cluster.client(slot)
        assert self._client is not None
        return self._client

    async def _guard(self, op: Callable[[], Awaitable[_T]]) -> _T:
        """Run one Redis operation, translating the driver's exceptions."""
        if self._closed:
            raise FrontierError("the redis frontier is closed")
        try:
            return await op()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError, TimeoutError) as exc:
            if self._cluster is not None:
                self._cluster.forget()  # the next call asks the cluster where the slots are now
            raise BackendUnavailableError(
                f"redis frontier at {self._url} is unavailable: {exc}", backend="redis", role="frontier"
            ) from exc
        except rexc.ResponseError as exc:
            text = str(exc)
            if isinstance(exc, _REFUSALS) or text.split(" ", 1)[0] in _REFUSAL_CODES:
                if self._cluster is not None:
                    self._cluster.forget()
                raise BackendUnavailableError(
                    f"redis at {self._url} refused: {exc.status_code or ''} {text}".replace("  ", " "),
                    backend="redis", role="frontier",
                ) from exc
            raise FrontierError(f"redis frontier script failed: {text}") from exc

    async def _run(self, shard: _Shard, name: str, *args: Any) -> Any:
        """Run script ``name`` on ``shard`` (followed by ``WAIT`` when ``wait_replicas`` asks for it)."""
        opts = self.options
        argv = [shard.kp, repr(self._clock.now()), repr(float(opts.delay)), opts.max_in_flight, *args]
        script = self._scripts[name]
        keys = [f"{shard.kp}:cfg"]  # not used by the scripts: it names the slot of the keys

        async def call() -> Any:
            client = await self._client_for(shard.slot)
            if not self._wait or name in _READ_ONLY:
                return await script(keys=keys, args=argv, client=client)
            # the script and WAIT on one connection: WAIT counts the replicas that have this client's writes
            async with client.pipeline(transaction=False) as pipe:
                await script(keys=keys, args=argv, client=pipe)
                pipe.execute_command("WAIT", self._wait, self._wait_ms)
                reply, acked = await pipe.execute()
            if int(acked) < self._wait:
                raise BackendUnavailableError(
                    f"redis frontier at {self._url}: {name.lower()} reached {int(acked)} of the "
                    f"{self._wait} replica(s) wait_replicas asks for within {self._wait_ms} ms; it may be lost "
                    "in a failover (an enqueue may be repeated: duplicates are filtered)",
                    backend="redis",
                    role="frontier",
                )
            return reply

        return await self._guard(call)

    async def _fan(self, calls: Sequence[tuple[_Shard, str, Sequence[Any]]]) -> list[Any]:
        """Run several scripts (on several shards) at once; each result, or the exception it raised."""
        if len(calls) == 1:
            shard, name, args = calls[0]
            try:
                return [await self._run(shard, name, *args)]
            except (BackendUnavailableError, FrontierError) as exc:
                return [exc]
        return list(
            await asyncio.gather(*(self._run(s, name, *args) for s, name, args in calls), return_exceptions=True)
        )

    async def _all(self, name: str, *args: Any) -> list[Any]:
        """Script ``name`` on every shard; the replies, or the first error raised."""
        replies = await self._fan([(shard, name, args) for shard in self._shards])
        _raise_first(replies)
        return replies

    def _shard_of(self, host: str) -> _Shard:
        shards = self._shards
        return shards[0] if len(shards) == 1 else shards[zlib.crc32(host.encode("utf-8")) % len(shards)]

    def _split_token(self, token: str) -> tuple[_Shard, str]:
        if len(self._shards) == 1:
            return self._shards[0], token
        k, _, inner = token.partition("/")
        if not k.isdigit() or int(k) >= len(self._shards):
            raise LeaseError(f"lease token {token!r} names no shard of this frontier")
        return self._shards[int(k)], inner

    async def _init(self) -> None:
        if self._ready:
            return
        opts = self.options
        if self._cluster is not None:
            self._shards = _cluster_shards(self.prefix, await self._shard_count())
        replies = await self._all("INIT", LAYOUT_VERSION, self._kind, self._bits, opts.capacity, repr(opts.error_rate))
        for reply in replies:
            status = _text(reply[0])
            if status == "layout":
                raise ConfigurationError(
                    f"the keys under prefix {self.prefix!r} use frontier layout {_text(reply[1])}, "
                    f"this version reads layout {LAYOUT_VERSION}; use another prefix or purge it"
                )
            kind = _text(reply[1])
            if kind != self._kind:
                raise ConfigurationError(
                    f"the frontier under prefix {self.prefix!r} was created with dupefilter={kind!r}, "
                    f"not {self._kind!r}; open it with dupefilter={kind!r} or purge it"
                )
        self._bits = int(replies[0][2])
        for host, policy in opts.host_policies.items():
            await self._policy(host, policy.delay, policy.max_in_flight)
        self._ready = True

    async def _shard_count(self) -> int:
        """The shard count stored at ``{prefix}:shards`` (set on first use: ``shards=`` or the default)."""
        key = f"{{{self.prefix}}}:shards"
        want = self._want_shards

        async def read() -> int:
            client = await self._client_for(key_slot(key.encode()))
            await client.set(key, want or _DEFAULT_SHARDS, nx=True)
            return int(_text(await client.get(key)))

        have = await self._guard(read)
        if want is not None and want != have:
            raise ConfigurationError(
                f"the frontier under prefix {self.prefix!r} was created with shards={have}, not {want}; "
                f"open it with shards={have} (or without shards=), or purge it"
            )
        return have

    def _filter_args(self, request: Request) -> tuple[int, int]:
        fp = fp_to_int(request.fingerprint)
        if self._kind == "exact":
            return fp & ((1 << self._bits) - 1), fp >> self._bits
        return fp & 0xFFFFFFFF, (fp >> 32) | 1

    def _encode(self, request: Request, number: int | str = "-") -> str:
        """A request as one ENQUEUE argument: ``"<df_a> <df_b> <not_before|-> <priority> <number|-> <host>
        <body>"`` (filter halves; ``number`` on a sharded frontier)."""
        a, b = self._filter_args(request)
        nb = "-" if request.not_before is None else repr(float(request.not_before))
        return f"{a} {b} {nb} {_priority(request)} {number} {request.host} {_body(request)}"

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        return await self.enqueue_requests([request]) == 1

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        await self._init()
        pending = list(requests)
        queued = 0
        while pending:
            chunk, rest = pending[:_BATCH], pending[_BATCH:]
            n_new, processed, full = await self._enqueue_chunk(chunk)
            queued += n_new
            if n_new:
                self._notify()
            pending = [r for r, done in zip(chunk, processed, strict=True) if not done] + rest
            if full and not any(processed):
                await self._when_full(pending[0].url, len(pending) - 1)
        return queued

    async def _enqueue_chunk(self, chunk: list[Request]) -> tuple[int, list[bool], bool]:
        """ENQUEUE a chunk on its shards: (queued, which requests were processed, did a shard say full)."""
        max_size = self.options.max_size or -1  # -1: unbounded
        common = [self._kind, self.options.dupefilter_unavailable]
        if len(self._shards) == 1:
            groups = {0: list(range(len(chunk)))}
            args: dict[int, list[Any]] = {0: [max_size, *common, ""]}
            args[0].extend(map(self._encode, chunk))
        else:
            groups = {}
            for i, request in enumerate(chunk):
                groups.setdefault(self._shard_of(request.host).number, []).append(i)
            base = await self._next_seqs(len(chunk))
            limits = await self._shard_limits(chunk, groups) if max_size >= 0 else dict.fromkeys(groups, -1)
            args = {}
            for k, positions in groups.items():
                args[k] = a = [limits[k], *common, "seq"]
                a.extend(self._encode(chunk[i], base + i) for i in positions)
        calls = [(self._shards[k], "ENQUEUE", args[k]) for k in groups]
        replies = await self._fan(calls)
        processed = [False] * len(chunk)
        n_new, full, error = 0, False, None
        for k, reply in zip(groups, replies, strict=True):
            if isinstance(reply, BaseException):
                error = error or reply
                continue
            status, new, done, message = reply
            n_new += int(new)
            for i in groups[k][: int(done)]:
                processed[i] = True
            status = _text(status)
            if status == "dferr":
                error = error or BackendUnavailableError(
                    f"the duplicate filter under prefix {self.prefix!r} cannot be used ({_text(message)}); "
                    "nothing more was queued (dupefilter_unavailable='allow' would queue unfiltered)",
                    backend="redis",
                    role="frontier",
                )
            full = full or status == "full"
        if error is not None:
            raise error
        return n_new, processed, full

    async def _next_seqs(self, n: int) -> int:
        """A sharded frontier's request numbers: ``n`` from the shared counter; returns the first."""
        key = f"{{{self.prefix}}}:seq"

        async def incr() -> int:
            client = await self._client_for(key_slot(key.encode()))
            return int(await client.incrby(key, n)) - n + 1

        return await self._guard(incr)

    async def _shard_limits(self, chunk: list[Request], groups: dict[int, list[int]]) -> dict[int, int]:
        """``max_size`` over shards: the room left (from the counts read now) goes to the chunk's first
        requests, in order; each shard may fill up to its count plus its share."""
        peeks = await self._all("PEEK")
        counts = [int(p[0]) for p in peeks]
        room = max(0, self.options.max_size - sum(counts))
        share = Counter(self._shard_of(r.host).number for r in chunk[:room])
        return {k: counts[k] + share[k] for k in groups}

    async def enqueue_robots(self, request: Request) -> bool:
        await self._init()
        added = int(await self._run(self._shard_of(request.host), "ROBOTS", request.host, _priority(request),
                                    _body(request)))
        if added:
            self._notify()
        return added == 1

    # -- lease -------------------------------------------------------------------------------------

    async def next_request(self) -> Lease | None:
        """One lease, or None; the calls made while a LEASE is out are served by the next one."""
        return await self._leases(None)

    async def _lease_for(self, callers: list[None]) -> list[Lease | None | BaseException]:
        leases: list[Lease | None | BaseException] = [*await self.next_requests(len(callers))]
        return leases + [None] * (len(callers) - len(leases))

    async def _give_back(self, lease: Lease | None) -> None:
        """A lease leased for a caller that has gone: back to the queue, as a cancelled page's."""
        if lease is not None:
            await self.retry(lease)

    async def next_requests(self, limit: int) -> list[Lease]:
        await self._init()
        if limit < 1:
            return []
        out: list[tuple[float, Lease]] = []
        while len(out) < limit:
            buried = await self._lease_round(limit - len(out), out)
            for entry in buried:
                await self._bury(*entry)
            if not buried:
                break
        if out:
            self._room_made()
        if len(self._shards) > 1:
            out.sort(key=lambda x: x[0])
        return [lease for _, lease in out]

    async def _lease_round(self, limit: int, out: list[tuple[float, Lease]]) -> list[_Buried]:
        """Lease up to ``limit`` into ``out`` (with their queue scores); returns the entries that could not
        be decoded (to be moved aside)."""
        lt = repr(float(self.options.lease_timeout))
        if len(self._shards) == 1:
            calls = [(self._shards[0], "LEASE", (limit, lt))]
        else:
            tops = await self._fan([(shard, "TOP", (limit,)) for shard in self._shards])
            scores = [
                (float(score), k) for k, top in enumerate(tops) if not isinstance(top, BaseException) for score in top
            ]
            if not scores:
                _raise_first(tops)
                return []
            if len(scores) < limit:
                # fewer ready hosts than asked for: hosts may give more than their head; ask the shards one
                # after the other, best head first, each for what is still missing
                return await self._lease_in_turn(limit, sorted(dict.fromkeys(k for _, k in sorted(scores))), out)
            quota = Counter(k for _, k in heapq.nsmallest(limit, scores))
            calls = [(self._shards[k], "LEASE", (n, lt)) for k, n in sorted(quota.items())]
        return self._take(calls, await self._fan(calls), out)

    async def _lease_in_turn(self, limit: int, order: list[int], out: list[tuple[float, Lease]]) -> list[_Buried]:
        lt = repr(float(self.options.lease_timeout))
        buried: list[_Buried] = []
        start = len(out)
        for k in order:
            if len(out) - start >= limit:
                break
            call = (self._shards[k], "LEASE", (limit - (len(out) - start), lt))
            try:
                buried += self._take([call], await self._fan([call]), out)
            except BackendUnavailableError:
                if len(out) == start:
                    raise  # nothing leased: say why; else the leases made are handed out
        return buried

    def _take(
        self, calls: Sequence[tuple[_Shard, str, Sequence[Any]]], replies: list[Any], out: list[tuple[float, Lease]]
    ) -> list[_Buried]:
        """The leases in LEASE ``replies`` into ``out``; returns the entries that could not be decoded."""
        buried: list[_Buried] = []
        got = False
        for (shard, _, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, BaseException):
                continue
            got = True
            expires = float(_text(reply[0])) + self.options.lease_timeout
            tag = "" if len(self._shards) == 1 else f"{shard.number}/"
            for i in range(1, len(reply), 5):
                token, payload, attempt = _text(reply[i]), _raw(reply[i + 1]), int(reply[i + 2])
                try:
                    request = _decode(payload.split(b"\t", 2)[2], _text(reply[i + 4]))
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    buried.append(_Buried(shard, token, payload, f"undecodable request record: {exc}"))
                    continue
                out.append((float(reply[i + 3]), Lease(tag + token, request, expires, attempt)))
        if not got:
            _raise_first(replies)  # every shard failed: say why (leases made by some are kept)
        return buried

    async def _bury(self, shard: _Shard, token: str, payload: bytes, reason: str) -> None:
        log.warning(
            "redis frontier %s: moved entry %s aside to %s:bad: %s (%r)",
            self.prefix,
            token.split(":", 1)[0],
            shard.kp,
            reason,
            payload[:200],
        )
        await self._run(shard, "BURY", token, reason)
        self._notify()

    async def _pending_and_wakeup(self) -> tuple[bool, float | None]:
        # the waiters that find nothing to lease look together: one PEEK while it is out
        if self._peeking is None or self._peeking.done():
            self._peeking = asyncio.ensure_future(self._peek())
            self._peeking.add_done_callback(_retrieved)
        queued, inflight, wake = await asyncio.shield(self._peeking)
        return bool(queued or inflight), wake

    async def _peek(self) -> tuple[int, int, float | None]:
        queued = inflight = 0
        wake: float | None = None
        for q, f, w in await self._all("PEEK"):
            queued += int(q)
            inflight += int(f)
            if w := _text(w):
                wake = float(w) if wake is None else min(wake, float(w))
        return queued, inflight, wake

    # -- settle ------------------------------------------------------------------------------------

    async def ack(self, lease: Lease) -> None:
        """Settle ``lease`` as done; the settles made while an ACK is out go together in the next one."""
        await self._settles(("ack", lease))

    async def ack_many(self, leases: Iterable[Lease]) -> None:
        batch = list(leases)
        for start in range(0, len(batch), _BATCH):
            await self._settle("ack", batch[start : start + _BATCH])

    async def _settle_for(self, calls: list[tuple[str, Lease]]) -> list[None | BaseException]:
        by_mode: dict[str, list[Lease]] = {}
        for mode, lease in calls:
            by_mode.setdefault(mode, []).append(lease)
        mode_failed: dict[str, BaseException] = {}
        bad: set[str] = set()
        for mode, leases in by_mode.items():
            try:
                bad |= await self._settle_some(mode, leases)
            except (BackendUnavailableError, FrontierError) as exc:
                mode_failed[mode] = exc
        return [
            mode_failed.get(mode)
            or (LeaseError(f"lease for {lease.request.url} unknown, expired or settled") if lease.token in bad
                else None)
            for mode, lease in calls
        ]

    async def _settle(self, mode: str, leases: Sequence[Lease]) -> None:
        bad = await self._settle_some(mode, leases)
        if bad:
            urls = [lease.request.url for lease in leases if lease.token in bad]
            raise LeaseError(f"lease(s) for {', '.join(urls)} unknown, expired or settled")

    async def _settle_some(self, mode: str, leases: Sequence[Lease]) -> set[str]:
        """Settle ``leases``; the tokens of those that were not valid leases."""
        if not leases:
            return set()
        await self._init()
        groups: dict[int, list[str]] = {}
        for lease in leases:
            shard, inner = self._split_token(lease.token)
            groups.setdefault(shard.number, []).append(inner)
        replies = await self._fan([(self._shards[k], "ACK", (mode, *tokens)) for k, tokens in groups.items()])
        self._notify()
        _raise_first(replies)
        tag = len(self._shards) > 1
        return {f"{k}/{_text(t)}" if tag else _text(t) for k, reply in zip(groups, replies, strict=True) for t in reply}

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        await self._init()
        shard, inner = self._split_token(lease.token)
        ok = await self._run(shard, "RETRY", inner, repr(float(max(0.0, delay))), lease.attempt)
        self._notify()
        if not ok:
            raise LeaseError(f"lease {lease.token} for {lease.request.url} is unknown, expired or settled")

    async def fail(self, lease: Lease, reason: str) -> None:
        await self._settles(("fail", lease))

    # -- politeness --------------------------------------------------------------------------------

    async def block_host(self, host: str, until: float) -> None:
        await self._init()
        await self._run(self._shard_of(host), "BLOCK_HOST", host, repr(float(until)))
        self._notify()

    async def stamp_send(self, host: str, margin: float = 0.0) -> float:
        """The fleet's send gate (:class:`~crawlherd.fetch.gate.SendStamps`): 0.0 when a request to
        ``host`` may leave now -- its delay plus ``margin`` has passed since the last request any
        process sharing this frontier sent there, and no Retry-After hold is on -- and the send is
        stamped, atomically; else the seconds to wait before asking again."""
        return await self._sends((host, float(margin)))

    async def _send_for(self, calls: list[tuple[str, float]]) -> list[float | BaseException]:
        """The sends asked while a SEND was out: one SEND per shard and margin, in the order asked."""
        await self._init()
        groups: dict[tuple[int, float], list[int]] = {}
        for i, (host, margin) in enumerate(calls):
            groups.setdefault((self._shard_of(host).number, margin), []).append(i)
        keys = list(groups)
        replies = await self._fan(
            [(self._shards[k], "SEND", (repr(m), *(calls[i][0] for i in groups[k, m]))) for k, m in keys]
        )
        out: list[float | BaseException] = [0.0] * len(calls)
        for key, reply in zip(keys, replies, strict=True):
            for n, i in enumerate(groups[key]):
                out[i] = reply if isinstance(reply, BaseException) else float(_text(reply[n]))
        return out

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        if delay is not None and delay < 0:
            raise ConfigurationError(f"delay={delay!r} for {host}: must be >= 0 seconds")
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigurationError(f"max_in_flight={max_in_flight!r} for {host}: must be >= 1")
        await self._init()
        await self._policy(host, delay, max_in_flight)
        self._notify()

    async def _policy(self, host: str, delay: float | None, max_in_flight: int | None) -> None:
        await self._run(
            self._shard_of(host),
            "POLICY",
            host,
            "" if delay is None else repr(float(delay)),
            "" if max_in_flight is None else max_in_flight,
        )

    # -- introspection -----------------------------------------------------------------------------

    async def has_pending_requests(self) -> bool:
        queued, inflight, _ = await self._peek()
        return bool(queued or inflight)

    async def idle(self) -> bool:
        return not await self.has_pending_requests()

    async def size(self) -> int:
        return (await self._peek())[0]

    async def stats(self) -> FrontierStats:
        await self._init()
        c: Counter[str] = Counter()
        hosts: dict[str, int] = {}
        inflight = 0
        oldest: float | None = None
        for counters_flat, shard_inflight, shard_oldest, depth_flat in await self._all("STATS"):
            c.update({_text(counters_flat[i]): int(counters_flat[i + 1]) for i in range(0, len(counters_flat), 2)})
            hosts.update({_text(depth_flat[i]): int(depth_flat[i + 1]) for i in range(0, len(depth_flat), 2)})
            inflight += int(shard_inflight)
            if o := _text(shard_oldest):
                oldest = float(o) if oldest is None else min(oldest, float(o))
        c["duplicates"] = c.pop("dup", 0)  # the scripts' counter name
        return FrontierStats.from_counters(
            c,
            queued=c["queued"],
            in_flight=inflight,
            oldest_queued_age=max(0.0, self._clock.now() - oldest) if oldest is not None else None,
            hosts=hosts,
            dupefilter_unavailable=c["dfu"],
            host_states=await self._host_states(),
        )

    async def _host_states(self) -> dict[str, HostState]:
        """Every host's politeness state (``hosts.lua``), for :meth:`stats`."""
        flat = [_text(v) for reply in await self._all("HOSTS") for v in reply]
        now = self._clock.now()
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

    async def bad_entries(self) -> dict[str, str]:
        """Entries moved aside (``KP:bad`` of each shard): id (``"<shard>/<id>"`` when sharded) ->
        ``"<reason>\\t<payload>"``."""
        await self._init()
        out: dict[str, str] = {}
        tag = len(self._shards) > 1
        for shard in self._shards:

            async def read(shard: _Shard = shard) -> Any:
                return await (await self._client_for(shard.slot)).hgetall(f"{shard.kp}:bad")

            raw = await self._guard(read)
            out.update({(f"{shard.number}/" if tag else "") + _text(k): _text(v) for k, v in raw.items()})
        return out

    async def _nodes(self) -> list[aioredis.Redis]:
        if self._cluster is not None:
            return await self._cluster.masters()
        assert self._client is not None
        return [self._client]

    def _match(self) -> str:
        """SCAN MATCH for every key of the frontier."""
        if self._cluster is None:
            return f"{_glob(self.prefix)}:*"
        return f"\\{{{_glob(self.prefix)}[.}}]*"  # {p}:... and {p.k.j}:...

    async def memory_usage(self) -> dict[str, int]:
        """Bytes Redis uses (``MEMORY USAGE``) per kind of key under the prefix: ``dupefilter``,
        ``queue`` (requests, queues, indexes) and ``other``. Scans the keys: an operator's tool."""

        async def measure() -> dict[str, int]:
            out = {"dupefilter": 0, "queue": 0, "other": 0}
            queue = ("q:", "ready", "timers", "delayed", "age", "lease", "lexp", "h")
            for node in await self._nodes():
                keys = [_text(k) async for k in node.scan_iter(match=self._match(), count=1000)]
                for start in range(0, len(keys), 1000):
                    part = keys[start : start + 1000]
                    pipe = node.pipeline(transaction=False)
                    for key in part:
                        pipe.memory_usage(key, samples=0)
                    for key, used in zip(part, await pipe.execute(), strict=True):
                        name = key.split("}:", 1)[1] if self._cluster is not None else key[len(self.prefix) + 1 :]
                        kind = (
                            "dupefilter"
                            if name.startswith(("df:", "bloom"))
                            else "queue"
                            if name.startswith(queue)
                            else "other"
                        )
                        out[kind] += int(used or 0)
            return out

        return await self._guard(measure)

    async def purge(self) -> int:
        """Delete every key under the prefix (queue, leases, duplicate filter, counters); returns how
        many keys were deleted. Workers using the prefix must be stopped first."""

        async def wipe() -> int:
            n = 0
            for node in await self._nodes():
                batch: list[Any] = []
                async for key in node.scan_iter(match=self._match(), count=1000):
                    batch.append(key)
                    if len(batch) >= 1000:
                        n += await _unlink(node, batch, self._cluster is not None)
                        batch = []
                if batch:
                    n += await _unlink(node, batch, self._cluster is not None)
            return n

        deleted = await self._guard(wipe)
        self._ready = False
        return deleted

    async def close(self) -> None:
        if self._begin_close():
            await self._leases.close()
            await self._settles.close()
            await self._sends.close()
            if self._cluster is not None:
                await self._cluster.aclose()
            elif self._owns_client and self._client is not None:
                await self._client.aclose()


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Mark a shared future's exception seen (its waiters may all have gone)."""
    if not fut.cancelled():
        fut.exception()


def _priority(request: Request) -> int:
    """The request's priority, clamped to what a score keeps exactly."""
    return max(-_PRIO_LIMIT, min(_PRIO_LIMIT, request.priority))


async def _unlink(node: aioredis.Redis, keys: list[Any], one_by_one: bool) -> int:
    """UNLINK keys; on a cluster node one by one (keys of several slots in one command are refused)."""
    if not one_by_one:
        return int(await node.unlink(*keys))
    pipe = node.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    return sum(int(n) for n in await pipe.execute())


def _raise_first(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply


def _body(request: Request) -> str:
    """A request as the frontier stores it: ``"<priority> <depth> <url> <fingerprint hex>"`` for a plain
    GET (most of a crawl's requests: handed out again without parsing its URL), else the JSON of
    :meth:`Request.to_record` (it starts with ``{``)."""
    rec = request.to_record()
    if len(rec) == 4 and " " not in request.url:  # v, url, p, d: nothing else to keep
        return f"{request.priority} {request.depth} {request.url} {request.fingerprint.hex()}"
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False)


def _decode(body: bytes, host: str) -> Request:
    """A stored body back to its request (``host``: the queue it was in). Also reads the plain form
    without a fingerprint (``"<priority> <depth> <url>"``), which earlier versions wrote."""
    if body[:1] == b"{":
        return Request.from_record(json.loads(body))
    parts = body.split(b" ", 3)
    if len(parts) == 4:
        prio, depth, url, fp = parts
        return Request._restore(url.decode("utf-8"), host, bytes.fromhex(fp.decode("ascii")), int(prio), int(depth))
    prio, depth, url = parts
    return Request(url.decode("utf-8"), priority=int(prio), depth=int(depth))


class _ClusterMap:
    """Where the slots of a Redis Cluster are: the cluster's own map (``CLUSTER SLOTS``, asked of any node
    it knows), looked up again after an error, so that after a failover the frontier talks to the promoted
    replica. One plain connection pool per master: a script and its ``WAIT`` go over one connection."""

    def __init__(self, netloc: str, timeout: float) -> None:
        address = cluster_address(netloc)
        self._user = address.username
        self._password = address.password
        self._timeout = timeout
        self._nodes: list[tuple[str, int]] = list(address.nodes)
        self._ranges: list[tuple[int, int, tuple[str, int]]] | None = None
        self._clients: dict[tuple[str, int], aioredis.Redis] = {}
        self._lock = asyncio.Lock()

    def _connect(self, host: str, port: int) -> aioredis.Redis:
        return aioredis.Redis(
            host=host,
            port=port,
            socket_timeout=self._timeout,
            socket_connect_timeout=self._timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_error=[],
            username=self._user,
            password=self._password,
        )

    def _client(self, addr: tuple[str, int]) -> aioredis.Redis:
        client = self._clients.get(addr)
        if client is None:
            client = self._clients[addr] = self._connect(*addr)
        return client

    async def _map(self) -> list[tuple[int, int, tuple[str, int]]]:
        async with self._lock:
            if self._ranges is None:
                self._ranges = ranges = await self._find()
                # a node that serves no slot now (a failed-over master) is not talked to again
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
        """Ask the cluster again on the next call (after an error: a failover may have moved a slot).
        The clients are kept: a node still serving slots is talked to over the same pool (redis-py drops
        a connection that failed), and those of nodes the new map leaves out are closed then -- so
        through an outage of any length there is at most one client per master."""
        self._ranges = None

    async def aclose(self) -> None:
        self._ranges = None
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def _find(self) -> list[tuple[int, int, tuple[str, int]]]:
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
                    addr = (_text(node[0]) or host, int(node[1]))
                    if addr not in self._nodes:
                        self._nodes.append(addr)
                out.append((int(start), int(end), (_text(primary[0]) or host, int(primary[1]))))
            if out:
                return out
            errors.append(f"{host}:{port}: no slots assigned")
        raise rexc.ConnectionError("; ".join(errors) or "no cluster node given")


async def _close_quietly(client: aioredis.Redis) -> None:
    """Close a client of a node that is gone from the map (its errors say nothing new)."""
    try:
        await client.aclose()
    except (rexc.RedisError, OSError):
        log.debug("closing a client of a former cluster master failed", exc_info=True)


def _glob(prefix: str) -> str:
    """``prefix`` with glob characters escaped, for SCAN MATCH."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix)
