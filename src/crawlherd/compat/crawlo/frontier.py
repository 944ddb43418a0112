"""Crawlo's scheduler, on crawlherd's frontier: its settings, its config helpers, its log lines.

A Crawlo project configures its scheduler with settings (``settings.py`` or a mapping)::

    QUEUE_TYPE = 'memory'            # or 'redis'
    FILTER_TYPE = 'memory'           # or 'redis'
    SCHEDULER_MAX_QUEUE_SIZE = 10000
    REDIS_HOST = '127.0.0.1'
    REDIS_PORT = 6379
    REDIS_PASSWORD = 'password'

:class:`CrawloSettings` reads them (with Crawlo's defaults: a memory queue and filter, a queue of at
most 10,000 requests) and says which frontier they mean (:attr:`~CrawloSettings.frontier_url`,
:attr:`~CrawloSettings.frontier_options`); :func:`open_crawlo_scheduler` opens it. The queue and the
duplicate filter may live on different backends, as in Crawlo: a memory queue with a Redis filter is a
:class:`SplitFrontier` (the queue in this process, the fingerprints in a Redis set shared by every
process and kept across restarts). Every enqueue and every duplicate is logged at DEBUG on the
``crawlherd.crawlo`` logger in Crawlo's words (``Request queued: <url>, Priority: <n>``, ``Duplicate
request filtered: <url>``); a full queue is a WARNING (``Queue is full``) and ``enqueue_request``
returns False, as Crawlo's scheduler does.

Deliberate differences, kept because they are what makes the frontier safe (see
``docs/migrating-from-crawlo.md``): the methods are coroutines (``await scheduler.enqueue_request(r)``),
and ``next_request()`` returns a :class:`~crawlherd.frontier.Lease` (``lease.request`` is the request)
that is settled with ``ack``/``retry``/``fail``; a request that is leased and never settled comes back
after ``lease_timeout``.

:class:`CrawloConfig` gives Crawlo's ``CrawloConfig.standalone(...)`` / ``.distributed(...)`` helpers;
``QueueFullException``, ``QueueConnectionException`` and ``FilterConnectionException`` are Crawlo's
names for :class:`~crawlherd.errors.QueueFullError` and
:class:`~crawlherd.errors.BackendUnavailableError`.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Self
from urllib.parse import quote, urlsplit

from crawlherd._aio import AsyncClosing
from crawlherd._redact import redact_url
from crawlherd.errors import BackendUnavailableError, ConfigurationError, QueueFullError
from crawlherd.frontier import Frontier, FrontierStats, Lease, open_scheduler
from crawlherd.request import Request

__all__ = [
    "CrawloConfig",
    "CrawloSettings",
    "FilterConnectionException",
    "LoggedFrontier",
    "QueueConnectionException",
    "QueueFullException",
    "RedisFingerprintFilter",
    "SplitFrontier",
    "open_crawlo_scheduler",
]

log = logging.getLogger("crawlherd.crawlo")

#: Crawlo's names for crawlherd's errors (its documentation catches these around queue and filter calls).
QueueFullException = QueueFullError
QueueConnectionException = BackendUnavailableError
FilterConnectionException = BackendUnavailableError

#: The settings read, with Crawlo's defaults.
DEFAULTS: dict[str, Any] = {
    "QUEUE_TYPE": "memory",
    "FILTER_TYPE": "memory",
    "SCHEDULER_MAX_QUEUE_SIZE": 10_000,
    "REDIS_HOST": "127.0.0.1",
    "REDIS_PORT": 6379,
    "REDIS_PASSWORD": None,
    "REDIS_DB": 0,
    "REDIS_URL": None,
    "PROJECT_NAME": "crawlherd",
    "DOWNLOAD_DELAY": 0.0,
}
_TYPES = ("memory", "redis")
# Setting names of the scheduler's families: one of these that is not known is a typo, not another
# component's setting, and is refused with the closest known name.
_FAMILIES = ("QUEUE_", "FILTER_", "SCHEDULER_", "REDIS_")


def _settings_of(source: Mapping[str, Any] | ModuleType | object) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return {str(k): v for k, v in source.items()}
    return {name: getattr(source, name) for name in dir(source) if name.isupper()}


def _refuse_unknown(given: Mapping[str, Any]) -> None:
    """A setting in the scheduler's families that is not one of :data:`DEFAULTS` is a typo: refused
    with the closest known name."""
    for name in given:
        if name.startswith(_FAMILIES) and name not in DEFAULTS:
            close = difflib.get_close_matches(name, list(DEFAULTS), n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(sorted(DEFAULTS))}"
            raise ConfigurationError(f"unknown scheduler setting {name}{hint}")


def _redis_url(s: Mapping[str, Any]) -> str:
    """``REDIS_URL``, checked, or the URL made of ``REDIS_HOST``, ``REDIS_PORT``, ``REDIS_PASSWORD``, ``REDIS_DB``."""
    url = s["REDIS_URL"]
    if url is not None:
        if urlsplit(str(url)).scheme not in ("redis", "rediss"):
            raise ConfigurationError(f"REDIS_URL={redact_url(str(url))!r}: must be a redis:// or rediss:// URL")
        return str(url)
    port = s["REDIS_PORT"]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigurationError(f"REDIS_PORT={port!r}: must be a port number")
    password = s["REDIS_PASSWORD"]
    auth = f":{quote(str(password), safe='')}@" if password else ""
    return f"redis://{auth}{s['REDIS_HOST']}:{port}/{int(s['REDIS_DB'])}"


@dataclass(frozen=True)
class CrawloSettings:
    """Crawlo's scheduler settings, checked: ``CrawloSettings.from_settings(settings_module_or_mapping)``.

    ``queue_type`` / ``filter_type``: ``memory`` or ``redis``. ``max_queue_size``:
    ``SCHEDULER_MAX_QUEUE_SIZE`` (Crawlo's default 10,000; 0 means unbounded). ``redis_url``:
    ``REDIS_URL`` or one made of ``REDIS_HOST``, ``REDIS_PORT``, ``REDIS_PASSWORD``, ``REDIS_DB``.
    ``project_name``: ``PROJECT_NAME``, the Redis key prefix. ``download_delay``: ``DOWNLOAD_DELAY``,
    the per-host delay. Other settings (the spider's, the downloader's) are left alone; a name in the
    scheduler's families (``QUEUE_*``, ``FILTER_*``, ``SCHEDULER_*``, ``REDIS_*``) that is not one of
    these is refused with the closest real one."""

    queue_type: str = "memory"
    filter_type: str = "memory"
    max_queue_size: int = 10_000
    redis_url: str = "redis://127.0.0.1:6379/0"
    project_name: str = "crawlherd"
    download_delay: float = 0.0

    @classmethod
    def from_settings(cls, source: Mapping[str, Any] | ModuleType | object) -> CrawloSettings:
        given = _settings_of(source)
        _refuse_unknown(given)
        s = {**DEFAULTS, **{k: v for k, v in given.items() if k in DEFAULTS}}
        for name in ("QUEUE_TYPE", "FILTER_TYPE"):
            value = str(s[name]).lower()
            if value not in _TYPES:
                raise ConfigurationError(f"{name}={s[name]!r}: use 'memory' or 'redis'")
            s[name] = value
        size = s["SCHEDULER_MAX_QUEUE_SIZE"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigurationError(f"SCHEDULER_MAX_QUEUE_SIZE={size!r}: must be an int >= 0 (0: unbounded)")
        delay = s["DOWNLOAD_DELAY"]
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            raise ConfigurationError(f"DOWNLOAD_DELAY={delay!r}: must be a number of seconds >= 0")
        url = _redis_url(s)
        project = str(s["PROJECT_NAME"])
        if not project or any(c in project for c in " ?&#/"):
            raise ConfigurationError(f"PROJECT_NAME={project!r}: a Redis key prefix without spaces or ?&#/")
        return cls(s["QUEUE_TYPE"], s["FILTER_TYPE"], size, url, project, float(delay))

    def __repr__(self) -> str:
        return (
            f"CrawloSettings(queue_type={self.queue_type!r}, filter_type={self.filter_type!r}, "
            f"max_queue_size={self.max_queue_size}, redis_url={redact_url(self.redis_url)!r}, "
            f"project_name={self.project_name!r}, download_delay={self.download_delay})"
        )

    @property
    def frontier_url(self) -> str:
        """The frontier these settings mean: ``memory://`` or the Redis URL with the project's prefix."""
        if self.queue_type == "memory":
            return "memory://"
        parts = urlsplit(self.redis_url)
        return parts._replace(query=f"prefix={self.project_name}").geturl()

    @property
    def frontier_options(self) -> dict[str, Any]:
        """The frontier options they mean: ``max_size`` (full: ``raise``, which the scheduler turns into
        Crawlo's warning and False) and ``delay``."""
        return {"max_size": self.max_queue_size, "full_policy": "raise", "delay": self.download_delay}

    @property
    def filter_key(self) -> str:
        """The Redis set of a Redis filter beside a memory queue."""
        return f"{self.project_name}:crawlo:dupefilter"


class CrawloConfig:
    """Crawlo's configuration helpers: ``CrawloConfig.standalone(queue_type='memory')`` (memory queue and
    filter unless told otherwise) and ``CrawloConfig.distributed(queue_type='redis', redis_host=...)``
    (Redis queue and filter). Keywords are the settings' names in lower case (``queue_type``,
    ``filter_type``, ``scheduler_max_queue_size``, ``redis_host``, ``redis_port``, ``redis_password``,
    ``redis_db``, ``redis_url``, ``project_name``, ``download_delay``). :meth:`to_dict` gives the
    settings, :attr:`settings` the checked :class:`CrawloSettings`, :meth:`open_scheduler` the frontier."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self._settings = dict(settings)
        self.settings = CrawloSettings.from_settings(self._settings)

    @classmethod
    def _make(cls, base: dict[str, Any], kwargs: Mapping[str, Any]) -> CrawloConfig:
        for key, value in kwargs.items():
            name = key.upper()
            if name not in DEFAULTS:
                close = difflib.get_close_matches(key, [n.lower() for n in DEFAULTS], n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise ConfigurationError(f"CrawloConfig: unknown option {key!r}{hint}")
            base[name] = value
        return cls(base)

    @classmethod
    def standalone(cls, **kwargs: Any) -> CrawloConfig:
        """One process: memory queue and memory filter (unless the keywords say otherwise)."""
        return cls._make({"QUEUE_TYPE": "memory", "FILTER_TYPE": "memory"}, kwargs)

    @classmethod
    def distributed(cls, **kwargs: Any) -> CrawloConfig:
        """Many processes: Redis queue and Redis filter (unless the keywords say otherwise)."""
        return cls._make({"QUEUE_TYPE": "redis", "FILTER_TYPE": "redis"}, kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The settings, Crawlo's defaults filled in."""
        return {**DEFAULTS, **self._settings}

    def open_scheduler(self, **options: Any) -> LoggedFrontier:
        """The frontier of these settings (see :func:`open_crawlo_scheduler`)."""
        return open_crawlo_scheduler(self.settings, **options)

    def __repr__(self) -> str:
        return f"CrawloConfig({self.settings!r})"


def open_crawlo_scheduler(
    settings: CrawloSettings | CrawloConfig | Mapping[str, Any] | ModuleType | object, **options: Any
) -> LoggedFrontier:
    """The frontier Crawlo settings mean, logging enqueues and duplicates as Crawlo does; use it as
    ``async with open_crawlo_scheduler(settings) as scheduler``. ``options``: more frontier options
    (``clock``, ``lease_timeout``, ``max_in_flight`` ...; they win over the settings')."""
    if isinstance(settings, CrawloConfig):
        s = settings.settings
    elif isinstance(settings, CrawloSettings):
        s = settings
    else:
        s = CrawloSettings.from_settings(settings)
    queue = open_scheduler(s.frontier_url, **{**s.frontier_options, **options})
    if s.filter_type == "redis" and s.queue_type == "memory":
        return LoggedFrontier(SplitFrontier(queue, RedisFingerprintFilter(s.redis_url, s.filter_key)))
    if s.filter_type == "memory" and s.queue_type == "redis":
        log.warning(
            "FILTER_TYPE='memory' with QUEUE_TYPE='redis': a Redis queue keeps its duplicate filter in Redis, "
            "shared by every process (stricter than a filter per process)"
        )
    return LoggedFrontier(queue)


class RedisFingerprintFilter:
    """A duplicate filter in one Redis set: ``RedisFingerprintFilter(url, key, *, socket_timeout=10)``.
    ``add(fp)`` is True when the fingerprint was new (one ``SADD``); ``discard(fp)`` takes it back (a
    request the queue refused, so that it can come again). Connection failures raise
    :class:`~crawlherd.errors.BackendUnavailableError` (Crawlo's ``FilterConnectionException``)."""

    def __init__(self, url: str, key: str, *, socket_timeout: float = 10.0) -> None:
        try:
            import redis.asyncio as aioredis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise ConfigurationError("FILTER_TYPE='redis' needs redis-py: pip install 'crawlherd[redis]'") from None
        self.key = key
        self._url = url
        try:
            self._client = aioredis.Redis.from_url(  # a pool as large as the calls at once (see the broker's)
                url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout,
                retry=Retry(NoBackoff(), 0), retry_on_error=[], max_connections=2**31,
            )
        except ValueError as exc:
            raise ConfigurationError(f"bad redis URL {redact_url(url)!r}: {exc}") from None

    async def _call(self, what: str, *args: Any) -> int:
        from redis.exceptions import RedisError

        try:
            return int(await getattr(self._client, what)(self.key, *args))
        except RedisError as exc:
            raise BackendUnavailableError(
                f"Redis duplicate filter at {redact_url(self._url)} ({type(exc).__name__}: {exc})", backend="redis"
            ) from exc

    async def add(self, fingerprint: bytes) -> bool:
        return await self._call("sadd", fingerprint) == 1

    async def add_many(self, fingerprints: list[bytes]) -> list[bool]:
        """One round trip per fingerprint, pipelined."""
        from redis.exceptions import RedisError

        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for fp in fingerprints:
                    pipe.sadd(self.key, fp)
                return [int(n) == 1 for n in await pipe.execute()]
        except RedisError as exc:
            raise BackendUnavailableError(
                f"Redis duplicate filter at {redact_url(self._url)} ({type(exc).__name__}: {exc})", backend="redis"
            ) from exc

    async def discard(self, fingerprint: bytes) -> None:
        await self._call("srem", fingerprint)

    async def size(self) -> int:
        return await self._call("scard")

    async def close(self) -> None:
        await self._client.aclose()


class _Delegate(AsyncClosing):
    """Every Frontier method handed to ``self.inner`` (subclasses override what they change)."""

    def __init__(self, inner: Frontier) -> None:
        self.inner = inner

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def enqueue_request(self, request: Request) -> bool:
        return await self.inner.enqueue_request(request)

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        return await self.inner.enqueue_requests(requests)

    async def enqueue_robots(self, request: Request) -> bool:
        return await self.inner.enqueue_robots(request)

    async def next_request(self) -> Lease | None:
        return await self.inner.next_request()

    async def wait_next(self, timeout: float | None = None) -> Lease | None:
        return await self.inner.wait_next(timeout)

    async def __aiter__(self) -> AsyncIterator[Lease]:
        while (lease := await self.wait_next()) is not None:
            yield lease

    async def ack(self, lease: Lease) -> None:
        await self.inner.ack(lease)

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        await self.inner.retry(lease, delay)

    async def fail(self, lease: Lease, reason: str) -> None:
        await self.inner.fail(lease, reason)

    async def block_host(self, host: str, until: float) -> None:
        await self.inner.block_host(host, until)

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        await self.inner.set_host_policy(host, delay=delay, max_in_flight=max_in_flight)

    async def has_pending_requests(self) -> bool:
        return await self.inner.has_pending_requests()

    async def idle(self) -> bool:
        return await self.inner.idle()

    async def size(self) -> int:
        return await self.inner.size()

    async def stats(self) -> FrontierStats:
        return await self.inner.stats()

    async def close(self) -> None:
        await self.inner.close()


class SplitFrontier(_Delegate):
    """A frontier whose duplicate filter lives elsewhere than its queue: ``SplitFrontier(queue,
    duplicate_filter)``. A request is checked against (and recorded in) the filter first; if the queue
    then refuses it (full), its fingerprint is taken back, so a request is recorded only when it is
    really queued. The queue keeps its own filter too (it cannot be turned off); the shared one is the
    filter's. ``close`` closes both."""

    def __init__(self, queue: Frontier, duplicate_filter: RedisFingerprintFilter) -> None:
        super().__init__(queue)
        self.filter = duplicate_filter
        self.duplicates_filtered = 0

    async def enqueue_request(self, request: Request) -> bool:
        fp = request.fingerprint
        if not await self.filter.add(fp):
            self.duplicates_filtered += 1
            return False
        try:
            return await self.inner.enqueue_request(request)
        except BaseException:
            await self._take_back(fp)
            raise

    async def _take_back(self, fingerprint: bytes) -> None:
        """Forget a fingerprint whose request the queue refused (best effort: the error that refused
        it is what the caller must see)."""
        with contextlib.suppress(Exception):
            await self.filter.discard(fingerprint)

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        batch = list(requests)
        fresh = await self.filter.add_many([r.fingerprint for r in batch])
        self.duplicates_filtered += fresh.count(False)
        queued = 0
        for i, (request, new) in enumerate(zip(batch, fresh, strict=True)):
            if not new:
                continue
            try:
                queued += await self.inner.enqueue_request(request)
            except BaseException:
                # this one and the later new ones were recorded but not queued: take them back
                for later, was_new in zip(batch[i:], fresh[i:], strict=True):
                    if was_new:
                        await self._take_back(later.fingerprint)
                raise
        return queued

    async def stats(self) -> FrontierStats:
        from dataclasses import replace

        inner = await self.inner.stats()
        return replace(inner, duplicates_filtered=inner.duplicates_filtered + self.duplicates_filtered)

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            await self.filter.close()


class LoggedFrontier(_Delegate):
    """A frontier that logs as Crawlo's scheduler does, on ``crawlherd.crawlo``: each request queued
    (DEBUG ``Request queued: <url>, Priority: <n>``), each duplicate (DEBUG ``Duplicate request
    filtered: <url>``), a full queue (WARNING ``Queue is full``, and ``enqueue_request`` returns False
    instead of raising -- Crawlo's contract)."""

    def __repr__(self) -> str:
        return f"<LoggedFrontier {self.inner!r}>"

    async def enqueue_request(self, request: Request) -> bool:
        try:
            queued = await self.inner.enqueue_request(request)
        except QueueFullError:
            log.warning("Queue is full: %s not queued", request.url)
            return False
        if log.isEnabledFor(logging.DEBUG):
            if queued:
                log.debug("Request queued: %s, Priority: %s", request.url, request.priority)
            else:
                log.debug("Duplicate request filtered: %s", request.url)
        return queued

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        """One by one, so that each is logged and a full queue refuses only what did not fit."""
        queued = 0
        for request in requests:
            queued += await self.enqueue_request(request)
        return queued

    async def next_request(self) -> Lease | None:
        lease = await self.inner.next_request()
        if lease is not None and log.isEnabledFor(logging.DEBUG):
            log.debug("Current queue size: %s", await self.inner.size())
        return lease
