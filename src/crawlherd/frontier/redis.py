"""``redis://``: a frontier shared by any number of worker processes on any number of machines.

``open_scheduler("redis://127.0.0.1:6379/0?prefix=mycrawl")``. Every multi-step operation (enqueue
with its duplicate check, lease with politeness, ack, retry, expiry and reclaim) is one Lua script, so
it is atomic: two workers never take the same request, never both pass a host's delay, and a
fingerprint is recorded exactly when its request is queued. The scripts are ``frontier/lua/*.lua``;
the key layout is documented at the top of ``frontier/lua/prelude.lua``.

- **Politeness shared by all workers**: host ready times and in-flight counts live in Redis.
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
default from ``capacity``, about 200 fingerprints per set, fixed when the frontier is created).

Hosts are keys (``P:q:<host>``) built inside the scripts. On a Redis Cluster
(``redis+cluster://host:port,host:port?prefix=p``) every key is under the hash tag ``{p}``, so the whole
frontier is in one slot and every script stays single-slot and atomic; the frontier talks to the master
of that slot (found with ``CLUSTER SLOTS``) and finds it again after a failover.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from crawlherd._lua import lua_script
from crawlherd._redact import redact_url
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
_UNAVAILABLE_REPLIES = ("OOM", "LOADING", "READONLY", "MASTERDOWN", "BUSY", "NOREPLICAS", "CLUSTERDOWN")
_T = TypeVar("_T")
_READ_ONLY = ("PEEK", "STATS", "HOSTS")  # scripts that write nothing: no WAIT after them

# The scripts (frontier/lua/*.lua), by name: the fragments each is made of, in order.
_SCRIPTS: dict[str, tuple[str, ...]] = {
    "INIT": ("init",),
    "ENQUEUE": ("prelude", "enqueue"),
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


class RedisFrontier(WaitingMixin):
    """A frontier in Redis; see the module docstring. Create it with :func:`open_scheduler` or
    :meth:`from_url`, or pass a live client: ``RedisFrontier(client, prefix="crawl")``."""

    def __init__(
        self,
        client: aioredis.Redis,
        options: FrontierOptions | None = None,
        *,
        prefix: str = "crawlherd",
        poll_interval: float = 0.2,
        dupefilter_bits: int | None = None,
        owns_client: bool = False,
        url: str = "redis://",
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        route: _ClusterRoute | None = None,
    ) -> None:
        if not prefix or any(c.isspace() for c in prefix):
            raise ConfigurationError(f"redis frontier prefix {prefix!r} must be non-empty, without spaces")
        if not poll_interval > 0:
            raise ConfigurationError(f"poll_interval={poll_interval!r} must be > 0 seconds")
        if dupefilter_bits is not None and not 0 <= dupefilter_bits <= 24:
            raise ConfigurationError(f"dupefilter_bits={dupefilter_bits!r} must be between 0 and 24")
        self.options = opts = options or FrontierOptions()
        self.prefix = prefix
        # the name the keys start with: on a Redis Cluster, the prefix as a hash tag, so that all the keys
        # of the frontier are in one slot and every script may use them all
        self._kp = f"{{{prefix}}}" if route is not None else prefix
        if route is not None:
            route.key = f"{self._kp}:cfg"
        self._route = route
        if not 0 <= wait_replicas <= 16:
            raise ConfigurationError(f"wait_replicas={wait_replicas!r} must be between 0 and 16")
        if not wait_timeout > 0:
            raise ConfigurationError(f"wait_timeout={wait_timeout!r} must be > 0 seconds")
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
            name: client.register_script(lua_script("crawlherd.frontier", *parts)) for name, parts in _SCRIPTS.items()
        }
        self._ready = False
        self._closed = False
        self._changed: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None

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
            },
        )
        timeout = own.pop("socket_timeout", 10.0)
        client = own.pop("client", None)
        owns = client is None
        parts = urlsplit(url)
        route = None
        if parts.scheme == "redis+cluster":
            if client is not None:
                raise ConfigurationError("a redis+cluster:// frontier makes its own connections: drop client=")
            try:
                route = _ClusterRoute(parts.netloc, timeout)
            except ValueError as exc:
                raise ConfigurationError(f"bad redis+cluster URL {redact_url(url)!r}: {exc}") from None
            client = aioredis.Redis()  # a placeholder until the slot's master is found; never connected
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
        return cls(client, opts, owns_client=owns, url=url, route=route, **own)

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
        return f"<RedisFrontier {self._url} prefix={self.prefix!r}>"

    # -- plumbing ----------------------------------------------------------------------------------

    async def _guard(self, op: Callable[[], Awaitable[_T]]) -> _T:
        """Run one Redis operation, translating the driver's exceptions."""
        if self._closed:
            raise FrontierError("the redis frontier is closed")
        try:
            if self._route is not None:
                self._client = await self._route.master()
            return await op()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError, TimeoutError) as exc:
            if self._route is not None:
                await self._route.forget()  # the next call asks the cluster where the slot is now
            raise BackendUnavailableError(
                f"redis frontier at {self._url} is unavailable: {exc}", backend="redis"
            ) from exc
        except rexc.ResponseError as exc:
            text = str(exc)
            if isinstance(exc, rexc.AskError) or text.startswith(_UNAVAILABLE_REPLIES):
                if self._route is not None:
                    await self._route.forget()
                raise BackendUnavailableError(f"redis at {self._url} refused: {text}", backend="redis") from exc
            raise FrontierError(f"redis frontier script failed: {text}") from exc

    async def _run(self, name: str, *args: Any) -> Any:
        opts = self.options
        argv = [self._kp, repr(self._clock.now()), repr(float(opts.delay)), opts.max_in_flight, *args]
        script = self._scripts[name]
        keys = [f"{self._kp}:cfg"]  # not used by the scripts: it names the slot of the keys
        if not self._wait or name in _READ_ONLY:
            return await self._guard(lambda: script(keys=keys, args=argv, client=self._client))

        async def durable() -> Any:
            # the script and WAIT on one connection: WAIT counts the replicas that have this client's writes
            async with self._client.pipeline(transaction=False) as pipe:
                await script(keys=keys, args=argv, client=pipe)
                pipe.execute_command("WAIT", self._wait, self._wait_ms)
                reply, acked = await pipe.execute()
            if int(acked) < self._wait:
                raise BackendUnavailableError(
                    f"redis frontier at {self._url}: {name.lower()} reached {int(acked)} of the "
                    f"{self._wait} replica(s) wait_replicas asks for within {self._wait_ms} ms; it may be lost "
                    "in a failover (an enqueue may be repeated: duplicates are filtered)",
                    backend="redis",
                )
            return reply

        return await self._guard(durable)

    async def _init(self) -> None:
        if self._ready:
            return
        opts = self.options
        reply = await self._run("INIT", LAYOUT_VERSION, self._kind, self._bits, opts.capacity, repr(opts.error_rate))
        status = _text(reply[0])
        if status == "layout":
            raise ConfigurationError(
                f"the keys under prefix {self.prefix!r} use frontier layout {_text(reply[1])}, "
                f"this version reads layout {LAYOUT_VERSION}; use another prefix or purge it"
            )
        kind, bits = _text(reply[1]), int(reply[2])
        if kind != self._kind:
            raise ConfigurationError(
                f"the frontier under prefix {self.prefix!r} was created with dupefilter={kind!r}, "
                f"not {self._kind!r}; open it with dupefilter={kind!r} or purge it"
            )
        self._bits = bits
        for host, policy in opts.host_policies.items():
            await self._run(
                "POLICY",
                host,
                "" if policy.delay is None else repr(float(policy.delay)),
                "" if policy.max_in_flight is None else policy.max_in_flight,
            )
        self._ready = True

    def _filter_args(self, request: Request) -> tuple[int, int]:
        fp = fp_to_int(request.fingerprint)
        if self._kind == "exact":
            return fp & ((1 << self._bits) - 1), fp >> self._bits
        return fp & 0xFFFFFFFF, (fp >> 32) | 1

    def _encode(self, request: Request) -> tuple[Any, ...]:
        """The six ENQUEUE values of a request: filter halves, not-before, priority, host, body."""
        a, b = self._filter_args(request)
        nb = "" if request.not_before is None else repr(float(request.not_before))
        return a, b, nb, _priority(request), request.host, _body(request)

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        return await self.enqueue_requests([request]) == 1

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        await self._init()
        batch = list(requests)
        queued = 0
        start = 0
        while start < len(batch):
            chunk = batch[start : start + _BATCH]
            args: list[Any] = [self.options.max_size, self._kind, self.options.dupefilter_unavailable]
            for request in chunk:
                args.extend(self._encode(request))
            status, n_new, processed, message = await self._run("ENQUEUE", *args)
            queued += int(n_new)
            start += int(processed)
            if n_new:
                self._notify()
            status = _text(status)
            if status == "dferr":
                raise BackendUnavailableError(
                    f"the duplicate filter under prefix {self.prefix!r} cannot be used ({_text(message)}); "
                    "nothing more was queued (dupefilter_unavailable='allow' would queue unfiltered)",
                    backend="redis",
                )
            if status == "full":
                await self._when_full(batch[start].url, len(batch) - start - 1)
        return queued

    async def enqueue_robots(self, request: Request) -> bool:
        await self._init()
        added = int(await self._run("ROBOTS", request.host, _priority(request), _body(request)))
        if added:
            self._notify()
        return added == 1

    # -- lease -------------------------------------------------------------------------------------

    async def next_request(self) -> Lease | None:
        leases = await self.next_requests(1)
        return leases[0] if leases else None

    async def next_requests(self, limit: int) -> list[Lease]:
        await self._init()
        if limit < 1:
            return []
        out: list[Lease] = []
        while len(out) < limit:
            reply = await self._run("LEASE", limit - len(out), repr(float(self.options.lease_timeout)))
            if len(reply) < 2:
                break
            expires = float(_text(reply[0])) + self.options.lease_timeout
            buried = 0
            for i in range(1, len(reply), 3):
                token, payload, attempt = _text(reply[i]), _raw(reply[i + 1]), int(reply[i + 2])
                try:
                    request = _decode(payload.split(b"\t", 2)[2])
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    await self._bury(token, payload, f"undecodable request record: {exc}")
                    buried += 1
                    continue
                out.append(Lease(token, request, expires, attempt))
            if not buried:
                break
        if out:
            self._room_made()
        return out

    async def _bury(self, token: str, payload: bytes, reason: str) -> None:
        log.warning(
            "redis frontier %s: moved entry %s aside to %s:bad: %s (%r)",
            self.prefix,
            token.split(":", 1)[0],
            self.prefix,
            reason,
            payload[:200],
        )
        await self._run("BURY", token, reason)
        self._notify()

    async def _pending_and_wakeup(self) -> tuple[bool, float | None]:
        queued, inflight, wake = await self._peek()
        return bool(queued or inflight), wake

    async def _peek(self) -> tuple[int, int, float | None]:
        queued, inflight, wake = await self._run("PEEK")
        w = _text(wake)
        return int(queued), int(inflight), float(w) if w else None

    # -- settle ------------------------------------------------------------------------------------

    async def ack(self, lease: Lease) -> None:
        await self._settle("ack", [lease])

    async def ack_many(self, leases: Iterable[Lease]) -> None:
        batch = list(leases)
        for start in range(0, len(batch), _BATCH):
            await self._settle("ack", batch[start : start + _BATCH])

    async def _settle(self, mode: str, leases: Sequence[Lease]) -> None:
        if not leases:
            return
        await self._init()
        bad = await self._run("ACK", mode, *(lease.token for lease in leases))
        self._notify()
        if bad:
            tokens = {_text(t) for t in bad}
            urls = [lease.request.url for lease in leases if lease.token in tokens]
            raise LeaseError(f"lease(s) for {', '.join(urls)} unknown, expired or settled")

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        await self._init()
        ok = await self._run("RETRY", lease.token, repr(float(max(0.0, delay))), lease.attempt)
        self._notify()
        if not ok:
            raise LeaseError(f"lease {lease.token} for {lease.request.url} is unknown, expired or settled")

    async def fail(self, lease: Lease, reason: str) -> None:
        await self._settle("fail", [lease])

    # -- politeness --------------------------------------------------------------------------------

    async def block_host(self, host: str, until: float) -> None:
        await self._init()
        await self._run("BLOCK_HOST", host, repr(float(until)))
        self._notify()

    async def stamp_send(self, host: str, margin: float = 0.0) -> float:
        """The fleet's send gate (:class:`~crawlherd.fetch.gate.SendStamps`): 0.0 when a request to
        ``host`` may leave now -- its delay plus ``margin`` has passed since the last request any
        process sharing this frontier sent there, and no Retry-After hold is on -- and the send is
        stamped, atomically; else the seconds to wait before asking again."""
        await self._init()
        return float(await self._run("SEND", host, repr(float(margin))))

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        if delay is not None and delay < 0:
            raise ConfigurationError(f"delay={delay!r} for {host}: must be >= 0 seconds")
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigurationError(f"max_in_flight={max_in_flight!r} for {host}: must be >= 1")
        await self._init()
        await self._run(
            "POLICY",
            host,
            "" if delay is None else repr(float(delay)),
            "" if max_in_flight is None else max_in_flight,
        )
        self._notify()

    # -- introspection -----------------------------------------------------------------------------

    async def has_pending_requests(self) -> bool:
        queued, inflight, _ = await self._peek()
        return bool(queued or inflight)

    async def idle(self) -> bool:
        return not await self.has_pending_requests()

    async def size(self) -> int:
        return (await self._peek())[0]

    async def stats(self) -> FrontierStats:
        counters_flat, inflight, oldest, depth_flat = await self._run("STATS")
        c = {_text(counters_flat[i]): int(counters_flat[i + 1]) for i in range(0, len(counters_flat), 2)}
        hosts = {_text(depth_flat[i]): int(depth_flat[i + 1]) for i in range(0, len(depth_flat), 2)}
        o = _text(oldest)
        return FrontierStats(
            queued=c.get("queued", 0),
            in_flight=int(inflight),
            duplicates_filtered=c.get("dup", 0),
            enqueued=c.get("enqueued", 0),
            acked=c.get("acked", 0),
            retries=c.get("retries", 0),
            failures=c.get("failures", 0),
            expired_leases=c.get("expired", 0),
            oldest_queued_age=max(0.0, self._clock.now() - float(o)) if o else None,
            hosts=hosts,
            dupefilter_unavailable=c.get("dfu", 0),
            host_states=await self._host_states(),
        )

    async def _host_states(self) -> dict[str, HostState]:
        """Every host's politeness state (``hosts.lua``), for :meth:`stats`."""
        flat = [_text(v) for v in await self._run("HOSTS")]
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
        """Entries moved aside (``P:bad``): id -> ``"<reason>\\t<payload>"``."""
        raw = await self._guard(lambda: self._client.hgetall(f"{self._kp}:bad"))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def memory_usage(self) -> dict[str, int]:
        """Bytes Redis uses (``MEMORY USAGE``) per kind of key under the prefix: ``dupefilter``,
        ``queue`` (requests, queues, indexes) and ``other``. Scans the keys: an operator's tool."""

        async def measure() -> dict[str, int]:
            out = {"dupefilter": 0, "queue": 0, "other": 0}
            df = (f"{self._kp}:df:", f"{self._kp}:bloom")
            queue = tuple(f"{self._kp}:{n}" for n in ("q:", "ready", "timers", "delayed", "age", "lease", "lexp", "h"))
            keys = [_text(k) async for k in self._client.scan_iter(match=f"{_glob(self._kp)}:*", count=1000)]
            for start in range(0, len(keys), 1000):
                part = keys[start : start + 1000]
                pipe = self._client.pipeline(transaction=False)
                for key in part:
                    pipe.memory_usage(key, samples=0)
                for key, used in zip(part, await pipe.execute(), strict=True):
                    kind = "dupefilter" if key.startswith(df) else "queue" if key.startswith(queue) else "other"
                    out[kind] += int(used or 0)
            return out

        return await self._guard(measure)

    async def purge(self) -> int:
        """Delete every key under the prefix (queue, leases, duplicate filter, counters); returns how
        many keys were deleted. Workers using the prefix must be stopped first."""

        async def wipe() -> int:
            n = 0
            batch: list[Any] = []
            async for key in self._client.scan_iter(match=f"{_glob(self._kp)}:*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    n += int(await self._client.unlink(*batch))
                    batch = []
            if batch:
                n += int(await self._client.unlink(*batch))
            return n

        deleted = await self._guard(wipe)
        self._ready = False
        return deleted

    async def close(self) -> None:
        if self._begin_close():
            if self._route is not None:
                await self._route.forget()
            elif self._owns_client:
                await self._client.aclose()


def _priority(request: Request) -> int:
    """The request's priority, clamped to what a score keeps exactly."""
    return max(-_PRIO_LIMIT, min(_PRIO_LIMIT, request.priority))


def _body(request: Request) -> str:
    """A request as the frontier stores it: ``"<priority> <depth> <url>"`` for a plain GET (most of a
    crawl's requests), else the JSON of :meth:`Request.to_record` (it starts with ``{``)."""
    rec = request.to_record()
    if len(rec) == 4 and " " not in request.url:  # v, url, p, d: nothing else to keep
        return f"{request.priority} {request.depth} {request.url}"
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False)


def _decode(body: bytes) -> Request:
    if body[:1] == b"{":
        return Request.from_record(json.loads(body))
    prio, depth, url = body.split(b" ", 2)
    return Request(url.decode("utf-8"), priority=int(prio), depth=int(depth))


class _ClusterRoute:
    """The master of one slot of a Redis Cluster: found from the cluster's own map (``CLUSTER SLOTS``,
    asked of any node it knows) and looked up again after an error, so that after a failover the
    frontier talks to the promoted replica. One plain connection pool to that master: a script and its
    ``WAIT`` go over one connection."""

    def __init__(self, netloc: str, timeout: float) -> None:
        auth, _, hosts = netloc.rpartition("@")
        user, _, password = auth.partition(":")
        self._user = unquote(user) or None
        self._password = unquote(password) or None
        self._timeout = timeout
        self._nodes: list[tuple[str, int]] = []
        for part in hosts.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{part!r} is not host:port")
            self._nodes.append((host.strip("[]"), int(port)))
        self.key = ""
        self._client: aioredis.Redis | None = None

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

    async def master(self) -> aioredis.Redis:
        if self._client is None:
            self._client = await self._find()
        return self._client

    async def forget(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _find(self) -> aioredis.Redis:
        slot = key_slot(self.key.encode("utf-8"))
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
            for start, end, primary, *replicas in ranges:
                for node in (primary, *replicas):  # learn every node, for the next look-up
                    addr = (_text(node[0]) or host, int(node[1]))
                    if addr not in self._nodes:
                        self._nodes.append(addr)
                if int(start) <= slot <= int(end):
                    return self._connect(_text(primary[0]) or host, int(primary[1]))
            errors.append(f"{host}:{port}: no node serves slot {slot}")
        raise rexc.ConnectionError("; ".join(errors) or "no cluster node given")


def _glob(prefix: str) -> str:
    """``prefix`` with glob characters escaped, for SCAN MATCH."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix)
