"""The ``redis://`` frontier: enqueue, lease, settle and politeness, on the shards of :mod:`._shards`
through the scripts of :mod:`._scripts`; the package docstring says what it guarantees."""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis

from crawlherd._aio import retrieved
from crawlherd._options import option_types
from crawlherd._redact import redact_url
from crawlherd._resilience import Batcher
from crawlherd.errors import BackendUnavailableError, ConfigurationError, FrontierError, LeaseError
from crawlherd.frontier._waiting import WaitingMixin
from crawlherd.frontier.base import FrontierStats, Lease
from crawlherd.frontier.options import FrontierOptions, HostPolicy
from crawlherd.frontier.redis import _admin
from crawlherd.frontier.redis._cluster import ClusterMap, no_retry
from crawlherd.frontier.redis._codec import decode, encode_body, enqueue_fields, packed, priority, raw, text
from crawlherd.frontier.redis._fleet import RobotsTexts, SendClock
from crawlherd.frontier.redis._liveness import Renewal
from crawlherd.frontier.redis._scripts import RedisCalls, raise_first, unavailable
from crawlherd.frontier.redis._shards import ClusterShards, OneRedis, Shard, Shards
from crawlherd.frontier.redis.options import RedisOptions
from crawlherd.request import Request

__all__ = ["RedisFrontier"]

log = logging.getLogger("crawlherd.frontier.redis")
_SPACE = re.compile(r"\s")  # what str.isspace() is true for: a token with one is none of ours
_TOKEN = re.compile(r"(\d+):(\d+)\.")  # a lease token's id and LEASE call serial (lease.lua)

LAYOUT_VERSION = "6"  # 4 (lease records by id) and 5 (gq without scores in its members) are moved to 6 by INIT
_BATCH = 500
# requests per ENQUEUE: a caller's batch of 1,000 is one script call, about 10 ms; at most 1,333 (ENQUEUE
# unpacks its six strings a request as the values of one C call: 8,000 at most)
_ENQUEUE_BATCH = 1000


class _Buried(NamedTuple):
    """A leased entry that could not be decoded: moved aside (BURY) by the caller."""

    shard: Shard
    token: str
    payload: bytes
    reason: str


class RedisFrontier(WaitingMixin):
    """A frontier in Redis; see :mod:`crawlherd.frontier.redis`. Create it with :func:`open_scheduler` or
    :meth:`from_url`, or pass a live client: ``RedisFrontier(client, redis_options=RedisOptions(prefix=
    "crawl"))`` (not closed by the frontier)."""

    def __init__(
        self,
        client: aioredis.Redis | None,
        options: FrontierOptions | None = None,
        redis_options: RedisOptions | None = None,
        *,
        owns_client: bool = False,
        url: str = "redis://",
        cluster: ClusterMap | None = None,
    ) -> None:
        self.options = opts = options or FrontierOptions()
        own = redis_options or RedisOptions()
        self.prefix = own.prefix
        self._shards: Shards
        if cluster is not None:
            self._shards = ClusterShards(cluster, own.prefix, want=own.shards)
        elif client is None:
            raise ConfigurationError("a redis frontier needs a client (or a redis+cluster:// URL)")
        elif own.shards not in (None, 1):
            raise ConfigurationError(
                f"shards={own.shards!r}: a redis:// frontier has one shard; shards are for redis+cluster://"
            )
        else:
            self._shards = OneRedis(client, own.prefix, owns_client=owns_client)
        self._url = redact_url(url)
        self._calls = RedisCalls(self._shards, opts, self._url, wait=own.wait_replicas, wait_timeout=own.wait_timeout)
        self._clock = opts.clock
        self._poll = own.poll_interval
        self.renewal = Renewal(self._calls, own.liveness, f"redis frontier {own.prefix}")
        bits = own.dupefilter_bits
        self._bits = bits if bits is not None else min(24, max(4, math.ceil(math.log2(max(opts.capacity, 16) / 200))))
        self._kind = opts.dupefilter
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
        self._send_clock, self._robots_txt = SendClock(self._calls, self._init, opts.clock), RobotsTexts(self._calls)
        self._peeking: asyncio.Future[tuple[int, int, float | None]] | None = None

    @classmethod
    def from_url(cls, url: str = "redis://127.0.0.1:6379/0", **options: Any) -> RedisFrontier:
        opts, own = FrontierOptions.build(url, options, extra={**option_types(RedisOptions), "client": aioredis.Redis})
        client = own.pop("client", None)
        redis_options = RedisOptions(**own)
        parts = urlsplit(url)
        timeout = redis_options.socket_timeout
        if parts.scheme == "redis+cluster":
            if client is not None:
                raise ConfigurationError("a redis+cluster:// frontier makes its own connections: drop client=")
            try:
                cluster = ClusterMap(parts.netloc, timeout)
            except ValueError as exc:
                raise ConfigurationError(f"bad redis+cluster URL {redact_url(url)!r}: {exc}") from None
            return cls(None, opts, redis_options, url=url, cluster=cluster)
        if client is not None:
            return cls(client, opts, redis_options, url=url)
        try:
            client = aioredis.Redis.from_url(
                urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), **no_retry(timeout)
            )
        except ValueError as exc:
            raise ConfigurationError(f"bad redis URL {redact_url(url)!r}: {exc}") from None
        return cls(client, opts, redis_options, owns_client=True, url=url)

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
        return f"<RedisFrontier {self._url} prefix={self.prefix!r} shards={len(self._shards.all)}>"

    async def _init(self) -> None:
        if self._ready:
            return
        await self._calls.guard(self._shards.open)
        opts = self.options
        replies = await self._calls.on_all(
            "INIT", LAYOUT_VERSION, self._kind, self._bits, opts.capacity, repr(opts.error_rate)
        )
        for reply in replies:
            if text(reply[0]) == "layout":
                raise ConfigurationError(
                    f"the keys under prefix {self.prefix!r} use frontier layout {text(reply[1])}, "
                    f"this version reads layout {LAYOUT_VERSION}; use another prefix or purge it"
                )
            if (kind := text(reply[1])) != self._kind:
                raise ConfigurationError(
                    f"the frontier under prefix {self.prefix!r} was created with dupefilter={kind!r}, "
                    f"not {self._kind!r}; open it with dupefilter={kind!r} or purge it"
                )
        self._bits = int(replies[0][2])
        for host, policy in opts.host_policies.items():
            await self._policy(host, policy)
        self._ready = True

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        return (await self.enqueue_many([request]))[0]

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        return sum(await self.enqueue_many(list(requests)))

    async def enqueue_many(self, requests: Sequence[Request]) -> list[bool]:
        """See :meth:`~crawlherd.frontier.base.EnqueueMany.enqueue_many`: one ENQUEUE a shard a chunk."""
        await self._init()
        flags, pending = [False] * len(requests), list(range(len(requests)))
        while pending:
            chunk, rest = pending[:_ENQUEUE_BATCH], pending[_ENQUEUE_BATCH:]
            n_new, processed, full = await self._enqueue_chunk([requests[i] for i in chunk])
            if n_new:
                self._notify()
            for i, queued in zip(chunk, processed, strict=True):
                flags[i] = bool(queued)
            pending = [i for i, queued in zip(chunk, processed, strict=True) if queued is None] + rest
            if full and all(queued is None for queued in processed):
                await self._when_full(requests[pending[0]].url, len(pending) - 1)
        return flags

    async def _enqueue_chunk(self, chunk: list[Request]) -> tuple[int, list[bool | None], bool]:
        """ENQUEUE a chunk on its shards: (queued, each request queued or not -- None: not processed --, full)."""
        shards = self._shards
        groups: dict[int, list[int]] = {}
        for i, request in enumerate(chunk):
            groups.setdefault(shards.of(request.host).number, []).append(i)
        first, origin = await self._calls.guard(lambda: shards.numbers(len(chunk)))
        limits = await self._limits(chunk)
        calls = []
        kind, bits = self._kind, self._bits
        for k, positions in groups.items():
            low = first + positions[0]  # the shard's lowest number: its age batch
            kp = shards.all[k].kp
            fields: list[str] = []
            members: list[str] = []
            for i in positions:
                *head, member = enqueue_fields(chunk[i], kind, bits, kp, first + i, low)
                fields += head
                members.append(member)
            args = (limits.get(k, -1), kind, self.options.dupefilter_unavailable, origin, len(positions),
                    low, first + positions[-1], packed(fields, array=False), *members)
            calls.append((shards.all[k], "ENQUEUE", args))
        replies = await self._calls.fan(calls)
        processed: list[bool | None] = [None] * len(chunk)
        n_new, full, error = 0, False, None
        for k, reply in zip(groups, replies, strict=True):
            if isinstance(reply, BaseException):
                error = error or reply
                continue
            status, new, done, message, queued = reply
            n_new += int(new)
            for i, flag in zip(groups[k][: int(done)], text(queued), strict=True):
                processed[i] = flag == "1"
            if text(status) == "dferr":
                error = error or unavailable(
                    f"the duplicate filter under prefix {self.prefix!r} cannot be used ({text(message)}); "
                    "nothing more was queued (dupefilter_unavailable='allow' would queue unfiltered)"
                )
            full = full or text(status) == "full"
        if error is not None:
            raise error
        return n_new, processed, full

    async def _limits(self, chunk: list[Request]) -> dict[int, int]:
        """Each shard's ``max_size`` for this chunk (none: -1)."""
        if not self.options.max_size:
            return {}

        async def counts() -> list[int]:
            return [int(p[0]) for p in await self._calls.on_all("PEEK")]

        return await self._shards.limits(self.options.max_size, counts, [r.host for r in chunk])

    async def enqueue_robots(self, request: Request) -> bool:
        await self._init()
        shard = self._shards.of(request.host)
        added = int(await self._calls.run(shard, "ROBOTS", request.host, priority(request), encode_body(request)))
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
        """Up to ``limit`` leases at once, best first (one LEASE per shard that has some)."""
        await self._init()
        if limit < 1:
            return []
        out: list[tuple[float, Lease]] = []
        while len(out) < limit:
            buried = await self._lease_round(limit - len(out), out)
            for entry in buried:
                await self._bury(entry)
            if not buried:
                break
        if out:
            self._room_made()
        out.sort(key=lambda x: x[0])
        return [lease for _, lease in out]

    async def _lease_round(self, limit: int, out: list[tuple[float, Lease]]) -> list[_Buried]:
        """Lease up to ``limit`` into ``out`` (with their queue scores); returns the entries that could not
        be decoded (to be moved aside)."""
        lt = self._lease_args()
        shards = self._shards.all

        async def heads(ask: dict[int, int]) -> list[Any]:
            return await self._calls.fan([(shards[k], "HEADS", (n,)) for k, n in ask.items()])

        plan = await self._shards.lease_plan(limit, heads)
        calls = [(shards[k], "LEASE", (n, *lt)) for k, n in plan.quota.items()]
        return self._take(calls, await self._calls.fan(calls), out) if calls else []

    def _lease_args(self) -> tuple[str, str]:
        """LEASE's lease timeout (a lease's deadline) and liveness (see :mod:`._liveness`)."""
        return repr(float(self.options.lease_timeout)), repr(float(self.renewal.liveness))

    def _take(
        self, calls: Sequence[tuple[Shard, str, Sequence[Any]]], replies: list[Any], out: list[tuple[float, Lease]]
    ) -> list[_Buried]:
        """The leases in LEASE ``replies`` into ``out``; returns the entries that could not be decoded."""
        buried: list[_Buried] = []
        got = False
        name = self._shards.token
        for (shard, _, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, BaseException):
                continue
            got = True
            expires = float(text(reply[0])) + self.options.lease_timeout
            # each token made of the call's parts: "<id>:<serial>.<n>@<deadline>" (n: its place in the reply)
            mid, at = f":{int(reply[1])}.", f"@{text(reply[2])}"
            tokens = []
            attempts = reply[3] or [1] * (len(reply) - 4)  # 0: every lease's first attempt
            for n, (payload, attempt) in enumerate(zip(map(raw, reply[4:]), attempts, strict=True), 1):
                # "<host>\t<score>\t<id>\t<batch>\t<body>" (LEASE checked the id)
                host, score, id_, _, body = payload.split(b"\t", 4)
                token = f"{id_.decode('ascii')}{mid}{n}{at}"
                try:
                    request = decode(body, host.decode("utf-8"))
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    buried.append(_Buried(shard, token, payload, f"undecodable request record: {exc}"))
                    continue
                lease = Lease(name(shard, token), request, expires, int(attempt))
                tokens.append(lease.token)
                out.append((float(score), lease))
            if tokens:
                self.renewal.hold(*tokens)
        if not got:
            raise_first(replies)  # every shard failed: say why (leases made by some are kept)
        return buried

    async def _bury(self, entry: _Buried) -> None:
        shard, token, payload, reason = entry
        log.warning(
            "redis frontier %s: moved entry %s aside to %s:bad: %s (%r)",
            self.prefix, token.split(":", 1)[0], shard.kp, reason, payload[:200],
        )
        with self.renewal.settling(self._shards.token(shard, token)):
            await self._calls.run(shard, "BURY", token, reason)
        self._notify()

    async def _pending_and_wakeup(self) -> tuple[bool, float | None]:
        # the waiters that find nothing to lease look together: one PEEK while it is out
        if self._peeking is None or self._peeking.done():
            self._peeking = asyncio.ensure_future(self._peek())
            self._peeking.add_done_callback(retrieved)
        queued, inflight, wake = await asyncio.shield(self._peeking)
        return bool(queued or inflight), wake

    async def _peek(self) -> tuple[int, int, float | None]:
        await self._init()
        queued = inflight = 0
        wake: float | None = None
        for q, f, w in await self._calls.on_all("PEEK"):
            queued += int(q)
            inflight += int(f)
            if w := text(w):
                wake = float(w) if wake is None else min(wake, float(w))
        return queued, inflight, wake

    # -- settle ------------------------------------------------------------------------------------

    async def ack(self, lease: Lease) -> None:
        """Settle ``lease`` as done; the settles made while an ACK is out go together in the next one."""
        await self._settles(("ack", lease))

    async def ack_many(self, leases: Iterable[Lease]) -> None:
        """Settle ``leases`` as done, one ACK per shard and 500 leases."""
        batch = list(leases)
        for start in range(0, len(batch), _BATCH):
            part = batch[start : start + _BATCH]
            bad = await self._settle_some("ack", part)
            if bad:
                urls = [lease.request.url for lease in part if lease.token in bad]
                raise LeaseError(f"lease(s) for {', '.join(urls)} unknown, expired or settled")

    async def fail(self, lease: Lease, reason: str) -> None:
        await self._settles(("fail", lease))

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

    async def _settle_some(self, mode: str, leases: Sequence[Lease]) -> set[str]:
        """Settle ``leases``; the tokens of those that were not valid leases."""
        if not leases:
            return set()
        await self._init()
        shards = self._shards
        # ACK takes each lease as its LEASE call's serial and its id, read from its token here: a token they
        # cannot be read from is none of ours (RENEW reads the tokens as one argument, space-separated: a
        # token with a space in it is none of ours either)
        foreign = {lease.token for lease in leases if not lease.token or _SPACE.search(lease.token)}
        groups = shards.group(lease.token for lease in leases if lease.token not in foreign)
        self.renewal.drop([lease.token for lease in leases])  # being settled: not renewed (see Renewal.drop)
        asked: dict[int, list[str]] = {}  # shard -> its tokens sent
        # shard -> for each run of its leases of one LEASE call, in the order sent: the call's serial, how many,
        # their ids (the serial once a run: mostly one run of hundreds -- each string sent is one Lua makes)
        parts: dict[int, list[str | int]] = {}
        leases_of: dict[int, set[tuple[str, str]]] = {}  # shard -> the leases sent (LEASE call, id)
        run: dict[int, tuple[str, int]] = {}  # shard -> the serial of its last run, where its count is
        for k, inner in groups.items():
            sent = parts.setdefault(k, [])
            for token in inner:
                if (m := _TOKEN.match(token)) is None:
                    foreign.add(shards.token(shards.all[k], token))
                    continue
                asked.setdefault(k, []).append(token)
                leases_of.setdefault(k, set()).add((m[2], m[1]))
                serial, at = run.get(k, ("", -1))
                if serial != m[2]:
                    at = len(sent) + 1
                    run[k] = (m[2], at)
                    sent.extend((m[2], 0))
                sent[at] = int(sent[at]) + 1
                sent.append(m[1])
        if not asked:
            return foreign
        # 'distinct': each lease (LEASE call and id: two tokens that differ elsewhere are one lease) sent once
        # -- ACK then keeps no table of the settled ids
        calls = []
        for k in asked:
            distinct = "distinct" if len(leases_of[k]) == len(asked[k]) else "-"
            calls.append((shards.all[k], "ACK", (mode, packed(parts[k]), distinct)))
        replies = await self._calls.fan(calls)
        self._notify()
        for k, reply in zip(asked, replies, strict=True):
            if isinstance(reply, BaseException):  # not settled (an outage): still held, renewed again
                self.renewal.hold(*(shards.token(shards.all[k], t) for t in asked[k]))
        raise_first(replies)
        bad = {
            shards.token(shards.all[k], asked[k][int(i) - 1]) for k, reply in zip(asked, replies, strict=True)
            for i in reply
        }
        return foreign | bad

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        # a give-back: never renewed again, even unsent (back after liveness, not kept until lease_timeout)
        self.renewal.drop([lease.token])
        await self._init()
        shard, inner = self._shards.split(lease.token)
        ok = await self._calls.run(shard, "RETRY", inner, repr(float(max(0.0, delay))), lease.attempt)
        self._notify()
        if not ok:
            raise LeaseError(f"lease {lease.token} for {lease.request.url} is unknown, expired or settled")

    # -- politeness --------------------------------------------------------------------------------

    async def block_host(self, host: str, until: float) -> None:
        await self._init()
        await self._calls.run(self._shards.of(host), "BLOCK_HOST", host, repr(float(until)))
        self._notify()

    async def stamp_send(self, host: str, owner: str) -> tuple[float, bool]:
        return await self._send_clock.stamp(host, owner)

    def stamp_answer(self, host: str, owner: str) -> None:
        self._send_clock.answered(host, owner)

    async def shared_robots_txt(self, origin: str) -> tuple[int, str] | None:
        return await self._robots_txt.get(origin)

    async def share_robots_txt(self, origin: str, status: int, text: str, ttl: float) -> None:
        await self._robots_txt.put(origin, status, text, ttl)

    async def claim_robots_txt(self, origin: str, seconds: float) -> bool:
        return await self._robots_txt.claim(origin, seconds)

    async def release_robots_txt(self, origin: str) -> None:
        await self._robots_txt.release(origin)

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        policy = HostPolicy().updated(host, delay=delay, max_in_flight=max_in_flight)
        await self._init()
        await self._policy(host, policy)
        self._notify()

    async def _policy(self, host: str, policy: HostPolicy) -> None:
        delay = "" if policy.delay is None else repr(float(policy.delay))
        cap = "" if policy.max_in_flight is None else policy.max_in_flight
        await self._calls.run(self._shards.of(host), "POLICY", host, delay, cap)

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
        return await _admin.stats(self._calls, self._clock)

    async def bad_entries(self) -> dict[str, str]:
        """Entries moved aside (``KP:bad`` of each shard): id (``"<shard>/<id>"`` when sharded) ->
        ``"<reason>\\t<payload>"``."""
        await self._init()
        return await _admin.bad_entries(self._calls)

    async def memory_usage(self) -> dict[str, int]:
        """Bytes Redis uses (``MEMORY USAGE``) per kind of key under the prefix: ``dupefilter``,
        ``queue`` (requests, queues, indexes) and ``other``. Scans the keys: an operator's tool."""
        return await _admin.memory_usage(self._calls)

    async def purge(self) -> int:
        """Delete every key under the prefix (queue, leases, duplicate filter, counters); returns how
        many keys were deleted. Workers using the prefix must be stopped first."""
        deleted = await _admin.purge(self._calls)
        self._ready = False
        return deleted

    async def close(self) -> None:
        if self._begin_close():
            await self.renewal.close()
            await self._send_clock.close()  # the answers being recorded first
            self._calls.closed = True
            await self._leases.close()
            await self._settles.close()
            await self._shards.aclose()
