"""Crawlo's Redis filter (``crawlo.filters.aioredis_filter``): the fingerprints in one Redis set, shared
by every process of a crawl and kept across restarts (crawlherd's
:class:`~crawlherd.compat.crawlo.frontier.RedisFingerprintFilter` underneath)."""

from __future__ import annotations

from typing import Any

from crawlherd.compat.crawlo.filters import BaseFilter, setting
from crawlherd.compat.crawlo.frontier import RedisFingerprintFilter
from crawlherd.errors import ConfigurationError

__all__ = ["AioRedisFilter"]


class AioRedisFilter(BaseFilter):
    """``AioRedisFilter(redis_key, client=None, stats=None, debug=False, log_level=20, ttl=None, *,
    redis_url=None)``: ``client`` a ``redis.asyncio`` client, or ``redis_url`` to make one; ``ttl``
    seconds the set lives after its last addition. :meth:`create_instance` reads ``REDIS_URL`` (or
    ``REDIS_HOST``, ``REDIS_PORT``, ``REDIS_PASSWORD``, ``REDIS_DB``) and ``PROJECT_NAME`` (the key is
    ``crawlo:<project>:filter:fingerprint``) and ``REDIS_TTL``."""

    def __init__(self, redis_key: str, client: Any = None, stats: Any = None, debug: bool = False,
                 log_level: int = 20, ttl: int | None = None, *, redis_url: str | None = None) -> None:
        super().__init__(stats=stats, debug=debug)
        self.redis_key = redis_key
        self.redis = client
        self.ttl = ttl
        self.log_level = log_level
        self._store = RedisFingerprintFilter(redis_url, redis_key) if redis_url and client is None else None

    @classmethod
    def create_instance(cls, crawler: Any = None, *args: Any, **kwargs: Any) -> AioRedisFilter:
        url = setting(crawler, "REDIS_URL")
        if not url:
            password = setting(crawler, "REDIS_PASSWORD")
            auth = f":{password}@" if password else ""
            url = (f"redis://{auth}{setting(crawler, 'REDIS_HOST', '127.0.0.1')}:{setting(crawler, 'REDIS_PORT', 6379)}"
                   f"/{setting(crawler, 'REDIS_DB', 0)}")
        project = setting(crawler, "PROJECT_NAME", "default")
        made = cls(f"crawlo:{project}:filter:fingerprint", stats=getattr(crawler, "stats", None),
                   debug=bool(setting(crawler, "FILTER_DEBUG", False)), ttl=setting(crawler, "REDIS_TTL"),
                   redis_url=str(url))
        made._configure(crawler)
        return made

    async def _sadd(self, fp: str) -> bool:
        if self._store is not None:
            added = await self._store.add(fp.encode())
            client: Any = self._store._client
        elif self.redis is not None:
            added = int(await self.redis.sadd(self.redis_key, fp)) == 1
            client = self.redis
        else:
            raise ConfigurationError("AioRedisFilter has no Redis: pass client= or redis_url=, or use create_instance")
        if self.ttl:
            await client.expire(self.redis_key, int(self.ttl))
        return added

    async def requested_async(self, request: Any) -> bool:
        """True when ``request`` was seen before, by this process or another (it is recorded otherwise)."""
        self._request_count += 1
        return not await self._sadd(self._get_fingerprint(request))

    async def add_fingerprint_async(self, fp: str) -> None:
        await self._sadd(fp)

    async def contains_async(self, fp: str) -> bool:
        if self._store is not None:
            return bool(await self._store._client.sismember(self.redis_key, fp))
        if self.redis is None:
            return False
        return bool(await self.redis.sismember(self.redis_key, fp))

    async def closed(self) -> None:
        if self._store is not None:
            await self._store.close()
