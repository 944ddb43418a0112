"""The Redis sessions store: shared by every worker of a fleet (``redis://host:port/db?prefix=...`` or
``redis+cluster://``, the frontier's own URL; its keys live under ``<prefix>:sessions:{<prefix>}:``,
the hash tag keeping them in one slot of a cluster, where each script's keys must be).

Keys: ``…:s:<site>`` (hash: session id -> JSON), ``…:h:<site>`` (hash: the tier, the runs that move it,
and per proxy label ``r|``/``b|``/``o|`` counts and ``u|`` rest-until), ``…:sites`` (set), ``…:c:<key>``
(claims, ``SET NX PX``) and ``…:n:<key>`` (counters). A use, an update and a recorded outcome are each
one Lua script (``lua/*.lua``): atomic across the fleet. Redis's errors come out as
:class:`~crawlherd.errors.BackendUnavailableError` (role ``frontier``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from redis import asyncio as aioredis
from redis.asyncio.cluster import ClusterNode
from redis.exceptions import ClusterDownError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from crawlherd._aio import AsyncClosing
from crawlherd._lua import lua_script
from crawlherd._redact import redact_url
from crawlherd._rediscluster import cluster_address
from crawlherd.errors import BackendUnavailableError, ConfigurationError
from crawlherd.sessions.base import Outcome, ProxyHealth, Session, SessionChange, SiteHealth, TierRule, keep_retired

__all__ = ["RedisSessions"]

_T = TypeVar("_T")
_PACKAGE = "crawlherd.sessions"


class RedisSessions(AsyncClosing):
    """Sessions and proxy health in Redis. ``RedisSessions(client, prefix="crawlherd")`` or
    :meth:`from_url`; closes only a client it made."""

    def __init__(
        self, client: aioredis.Redis | aioredis.RedisCluster, *, prefix: str = "crawlherd", owns_client: bool = False,
        url: str = "",
    ) -> None:
        self._r = client
        self._k = f"{prefix}:sessions:{{{prefix}}}:"
        self._owns = owns_client
        self._url = url
        self._use = client.register_script(lua_script(_PACKAGE, "use"))
        self._update = client.register_script(lua_script(_PACKAGE, "update"))
        self._record = client.register_script(lua_script(_PACKAGE, "record"))

    @classmethod
    def from_url(cls, url: str = "redis://127.0.0.1:6379/0", **options: Any) -> RedisSessions:
        parts = urlsplit(url)
        prefix = str(options.pop("prefix", None) or parse_qs(parts.query).get("prefix", ["crawlherd"])[0])
        client = options.pop("client", None)
        if client is not None:
            return cls(client, prefix=prefix, url=url)
        if parts.scheme == "redis+cluster":
            try:
                address = cluster_address(parts.netloc)
            except ValueError as exc:
                raise ConfigurationError(f"bad redis+cluster URL {redact_url(url)!r}: {exc}") from None
            nodes = [ClusterNode(host, port) for host, port in address.nodes]
            cluster = aioredis.RedisCluster(startup_nodes=nodes, username=address.username,
                                            password=address.password, socket_timeout=10.0)
            return cls(cluster, prefix=prefix, owns_client=True, url=url)
        try:
            client = aioredis.Redis.from_url(  # a pool as large as the calls at once (see the broker's)
                urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
                socket_timeout=10.0, socket_connect_timeout=10.0, max_connections=2**31,
            )
        except ValueError as exc:
            raise ConfigurationError(f"bad redis URL {redact_url(url)!r}: {exc}") from None
        return cls(client, prefix=prefix, owns_client=True, url=url)

    def __repr__(self) -> str:
        return f"<RedisSessions {redact_url(self._url)} keys={self._k}*>"

    async def _call(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        try:
            return await fn()
        except (RedisConnectionError, RedisTimeoutError, ClusterDownError, OSError) as exc:
            message = f"the sessions store at {redact_url(self._url)} is unavailable ({exc})"
            raise BackendUnavailableError(message, backend="redis", role="frontier") from exc

    async def sessions(self, site: str) -> list[Session]:
        raw: dict[bytes, bytes] = await self._call(lambda: self._r.hgetall(self._k + "s:" + site))  # type: ignore[arg-type,return-value]
        kept = {s.id: s for s in (_session(v) for v in raw.values())}
        old = keep_retired(kept)
        if old:
            await self._call(lambda: self._r.hdel(self._k + "s:" + site, *old))
            for i in old:
                del kept[i]
        return list(kept.values())

    async def add(self, site: str, session: Session) -> None:
        async def add() -> None:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.hset(self._k + "s:" + site, session.id, session.to_json())
                pipe.sadd(self._k + "sites", site)
                await pipe.execute()

        await self._call(add)

    async def use(self, site: str, session_id: str) -> Session | None:
        raw = await self._call(lambda: self._use(keys=[self._k + "s:" + site], args=[session_id]))
        return _session(raw) if raw else None

    async def update(self, site: str, session_id: str, change: SessionChange) -> Session | None:
        args = [
            session_id,
            "" if change.cookies is None else json.dumps(change.cookies) if change.cookies else "[]",
            "1" if change.error else "0",
            "" if change.login_epoch is None else str(change.login_epoch),
            change.retire or "",
        ]
        raw = await self._call(lambda: self._update(keys=[self._k + "s:" + site], args=args))
        return _session(raw) if raw else None

    async def record(self, site: str, proxy: str, outcome: Outcome, *, now: float, rule: TierRule) -> SiteHealth:
        args: list[str | int] = [
            site, proxy, outcome, repr(now), rule.tiers, repr(rule.cool_off), rule.escalate_after, rule.descend_after,
        ]
        flat = await self._call(lambda: self._record(keys=[self._k + "h:" + site, self._k + "sites"], args=args))
        return _health(dict(zip(flat[::2], flat[1::2], strict=True)))

    async def health(self, site: str) -> SiteHealth:
        raw: dict[bytes, bytes] = await self._call(lambda: self._r.hgetall(self._k + "h:" + site))  # type: ignore[arg-type,return-value]
        return _health(raw)

    async def claim(self, key: str, ttl: float) -> bool:
        got = await self._call(lambda: self._r.set(self._k + "c:" + key, b"1", nx=True, px=max(1, int(ttl * 1000))))
        return bool(got)

    async def count(self, key: str, ttl: float) -> int:
        async def count() -> int:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.incr(self._k + "n:" + key)
                pipe.expire(self._k + "n:" + key, max(1, int(ttl)), nx=True)
                n, _ = await pipe.execute()
                return int(n)

        return await self._call(count)

    async def sites(self) -> list[str]:
        members = await self._call(lambda: self._r.smembers(self._k + "sites"))
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    async def purge(self) -> int:
        n = len(await self.sites())
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self._k) + "*"  # the key prefix, its glob characters escaped

        async def wipe() -> None:
            batch: list[Any] = []
            async for key in self._r.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    await self._r.unlink(*batch)
                    batch = []
            if batch:
                await self._r.unlink(*batch)

        await self._call(wipe)
        return n

    async def close(self) -> None:
        if self._owns:
            self._owns = False
            await self._r.aclose()


def _session(raw: bytes | str) -> Session:
    data = json.loads(raw)
    if not data.get("cookies"):
        data["cookies"] = []  # Lua's cjson writes an empty list as {}
    if not data.get("headers"):
        data["headers"] = {}
    return Session.from_json(json.dumps(data))


def _health(raw: dict[bytes, bytes]) -> SiteHealth:
    fields = {k.decode(): v.decode() for k, v in raw.items()}
    proxies: dict[str, dict[str, Any]] = {}
    names = {"r": "requests", "b": "blocks", "o": "successes", "u": "rest_until"}
    for key, value in fields.items():
        kind, sep, label = key.partition("|")
        if sep and kind in names:
            proxies.setdefault(label, {})[names[kind]] = float(value) if kind == "u" else int(value)
    return SiteHealth(
        tier=int(fields.get("tier", 0)),
        blocks_in_row=int(fields.get("bir", 0)),
        successes_in_row=int(fields.get("sir", 0)),
        proxies={label: ProxyHealth(label, **v) for label, v in proxies.items()},
    )
