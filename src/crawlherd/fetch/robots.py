"""robots.txt, parsed with protego and cached per host (scheme + host + port).

A robots.txt with an unknown charset is read as UTF-8; one that cannot be parsed, or the part past
512 KiB, sets no rules. Semantics follow RFC 9309: a 4xx answer (no robots.txt) allows everything; a 5xx answer or an
unreachable server disallows everything for a short while (the site is in trouble; come back later).
:meth:`RobotsCache.check` tells the two refusals apart: :class:`~crawlherd.errors.RobotsDisallowedError`
when the rules forbid the URL, :class:`~crawlherd.errors.RobotsUnavailableError` naming what went wrong
(DNS failure, refused connection, timeout, 5xx answer) when robots.txt could not be read.
One fetch per host at a time: concurrent callers for the same host share it.

A crawl schedules robots.txt as work of its host (:func:`robots_request`, queued with the frontier's
``enqueue_robots``): fetched in a slot of its own, spaced like any request of the host, before the host's
pages are handed out; :meth:`RobotsCache.load` fetches it then, and the pages find it cached. ``Crawl-delay`` is handed
to ``on_crawl_delay(host, seconds)`` once per host -- the crawler wires it to the frontier's
``set_host_policy(host, delay=...)``.

Processes sharing a frontier (Redis) share what they read (:class:`SharedRobots`, :meth:`RobotsCache.share`):
a host's robots.txt is fetched once by the process that took its robots work, and a process handed one of
the host's pages reads it from the store instead of fetching it again (which would cost the host a
delay). Processes that need it at the same moment do not all fetch it: the first claims the fetch, the
others wait for what it shares (:data:`CLAIM_SECONDS` at most, then they fetch it themselves). What could
not be read (an error, a 5xx) is not shared: the claim is given back, and each process finds out for itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit

from protego import Protego

from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import (
    AddressNotAllowedError,
    BackendUnavailableError,
    BodyTooLargeError,
    ContentTypeError,
    FetchError,
    FrontierError,
    RobotsDisallowedError,
    RobotsUnavailableError,
)
from crawlherd.fetch.base import Fetcher
from crawlherd.request import Request
from crawlherd.url import split_origin

__all__ = ["MAX_ROBOTS_CHARS", "ROBOTS_META", "RobotsCache", "SharedRobots", "is_robots_request", "robots_request"]

log = logging.getLogger(__name__)

#: How much of a robots.txt is read (characters); RFC 9309 asks for at least 500 KiB.
MAX_ROBOTS_CHARS = 512 * 1024

CrawlDelayHook = Callable[[str, float], Awaitable[None]]
_T = TypeVar("_T")

#: The ``Request.meta`` key that marks a request as its host's robots.txt work (not a page of the crawl).
ROBOTS_META = "robots_txt"
#: How long a process's claim on a host's robots.txt holds the other processes (waiting for it to share).
CLAIM_SECONDS = 10.0
_CLAIM_POLL = 0.05  # seconds between a waiting process's looks at the store
#: URLs whose robots.txt answer is kept between a link's queueing and its fetch (RobotsCache.known_disallowed).
_ALLOWED_KEPT = 50_000


@runtime_checkable
class SharedRobots(Protocol):
    """robots.txt files kept for the processes sharing a frontier (``RedisFrontier``), by origin
    (``scheme://host[:port]``)."""

    async def shared_robots_txt(self, origin: str) -> tuple[int, str] | None:
        """The HTTP status and text of ``origin``'s robots.txt as a process read it, while fresh."""
        ...

    async def share_robots_txt(self, origin: str, status: int, text: str, ttl: float) -> None:
        """Keep ``origin``'s robots.txt (its HTTP status, 2xx or 4xx, and text) for ``ttl`` seconds."""
        ...

    async def claim_robots_txt(self, origin: str, seconds: float) -> bool:
        """Take the fetch of ``origin``'s robots.txt for ``seconds`` at most: True when this caller takes
        it, False while another process holds it (it will share what it reads)."""
        ...

    async def release_robots_txt(self, origin: str) -> None:
        """Give up a claim (:meth:`claim_robots_txt`): the fetch found nothing to share."""
        ...


def robots_request(url: str, *, priority: int = 0) -> Request:
    """The robots.txt request of ``url``'s origin, marked as robots work (:data:`ROBOTS_META`)."""
    parts = urlsplit(url)
    return Request(f"{parts.scheme}://{parts.netloc}/robots.txt", priority=priority, meta={ROBOTS_META: True})


def is_robots_request(request: Request | None) -> bool:
    """True for a request made by :func:`robots_request` (a page at /robots.txt is not one)."""
    return request is not None and request.url.endswith("/robots.txt") and request.meta.get(ROBOTS_META) is True


@dataclass(slots=True)
class _Entry:
    parser: Protego | None  # None: allow everything
    disallow_all: bool
    expires_at: float
    #: Why robots.txt could not be read (disallow_all is then True); None when it was read.
    problem: str | None = None
    cause: FetchError | None = None
    status: int | None = None  # robots.txt's HTTP status; None when there was no answer


class RobotsCache:
    """``RobotsCache(fetcher, *, user_agent=None, ttl=3600, error_ttl=60, clock=None,
    on_crawl_delay=None)``; ask :meth:`allowed`."""

    def __init__(
        self,
        fetcher: Fetcher,
        *,
        user_agent: str | None = None,
        ttl: float = 3600.0,
        error_ttl: float = 60.0,
        clock: Clock | None = None,
        on_crawl_delay: CrawlDelayHook | None = None,
        max_entries: int = 10_000,
    ) -> None:
        if ttl <= 0 or error_ttl <= 0:
            raise ValueError("RobotsCache ttl and error_ttl must be > 0 seconds")
        self._fetcher = fetcher
        self.user_agent = user_agent or fetcher.limits.user_agent
        self._ttl = ttl
        self._error_ttl = error_ttl
        self._clock = clock or SystemClock()
        self._on_crawl_delay = on_crawl_delay
        self._max_entries = max_entries
        self._entries: dict[str, _Entry] = {}
        self._pending: dict[str, asyncio.Future[_Entry]] = {}
        self._delays_sent: set[str] = set()
        # URLs known_disallowed() found allowed, with the entry whose rules said so: check() -- the fetch of
        # the link just queued -- takes that answer while the entry is fresh (a robots.txt read within its
        # ttl said so) rather than asking the same rules again.
        self._allowed: dict[str, _Entry] = {}
        self._shared: SharedRobots | None = None
        self.fetches = 0

    @property
    def shared(self) -> SharedRobots | None:
        """The robots.txt files shared with other processes (:meth:`share`), if any."""
        return self._shared

    def share(self, store: SharedRobots | None) -> None:
        """Read robots.txt from ``store`` before fetching it, and keep there what is fetched (None: this
        process's cache only)."""
        self._shared = store

    async def allowed(self, url: str) -> bool:
        """True when robots.txt of ``url``'s host lets our user agent fetch it."""
        scheme, netloc = split_origin(url)
        entry = await self._entry(f"{scheme}://{netloc}", netloc)
        if entry.disallow_all:
            return False
        if entry.parser is None:
            return True
        return bool(entry.parser.can_fetch(url, self.user_agent))

    async def check(self, url: str, request: Request | None = None) -> None:
        """Return when robots.txt lets our user agent fetch ``url``; else raise
        :class:`~crawlherd.errors.RobotsDisallowedError` (its rules forbid it) or
        :class:`~crawlherd.errors.RobotsUnavailableError` (it could not be read, and says why)."""
        allowed = self._allowed
        if allowed:  # a link known_disallowed() found allowed: what those rules said, while they are fresh
            kept = allowed.pop(url, None)
            if kept is not None and kept.expires_at > self._clock.now():
                return
        scheme, netloc = split_origin(url)
        origin = f"{scheme}://{netloc}"
        entry = self._entries.get(origin)
        if entry is None or entry.expires_at <= self._clock.now():  # else no coroutine for a cached answer
            entry = await self._entry(origin, netloc)
        if entry.problem is not None:
            raise RobotsUnavailableError(
                f"{url}: not fetched: {origin}/robots.txt could not be read: {entry.problem}",
                url=url, request=request, cause=entry.cause,
            )
        if entry.disallow_all:
            raise _disallowed(url, request)
        parser = entry.parser
        if parser is not None and not parser.can_fetch(url, self.user_agent):
            raise _disallowed(url, request)

    def known_disallowed(self, url: str, request: Request | None = None) -> RobotsDisallowedError | None:
        """Without fetching: the error :meth:`check` would raise when robots.txt of ``url``'s origin is
        cached, fresh and its rules forbid ``url``; None otherwise (allowed, or not known yet)."""
        scheme, netloc = split_origin(url)
        entry = self._entries.get(f"{scheme}://{netloc}")
        if entry is None or entry.problem is not None or entry.expires_at <= self._clock.now():
            return None
        if entry.disallow_all:
            return _disallowed(url, request)
        parser = entry.parser
        if parser is None:
            return None
        if not parser.can_fetch(url, self.user_agent):
            return _disallowed(url, request)
        allowed = self._allowed
        if len(allowed) >= _ALLOWED_KEPT:  # links queued and never fetched (duplicates, a stopped crawl)
            allowed.clear()
        allowed[url] = entry
        return None

    async def load(self, url: str) -> tuple[int | None, str | None]:
        """Fetch robots.txt of ``url``'s origin now, unless it is cached (shared with concurrent callers).
        What it says (or why it could not be read) is then what :meth:`check` answers from the cache.
        Returns (its HTTP status or None, why it could not be read or None). Raises
        :class:`~crawlherd.errors.AddressNotAllowedError` when the host itself may not be fetched."""
        scheme, netloc = split_origin(url)
        entry = await self._entry(f"{scheme}://{netloc}", netloc)
        return entry.status, entry.problem

    def crawl_delay(self, url: str) -> float | None:
        """The cached Crawl-delay for ``url``'s host (None when unknown or unset)."""
        scheme, netloc = split_origin(url)
        entry = self._entries.get(f"{scheme}://{netloc}")
        if entry is None or entry.parser is None:
            return None
        delay = entry.parser.crawl_delay(self.user_agent)
        return None if delay is None else float(delay)

    async def _entry(self, origin: str, host: str) -> _Entry:
        entry = self._entries.get(origin)
        if entry is not None and entry.expires_at > self._clock.now():
            return entry
        pending = self._pending.get(origin)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[_Entry] = asyncio.get_running_loop().create_future()
        self._pending[origin] = fut
        try:
            entry = await self._load(origin)
            if len(self._entries) >= self._max_entries:
                self._entries.pop(next(iter(self._entries)))
            self._entries[origin] = entry
            fut.set_result(entry)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters get it through shield, nobody else must log it
            raise
        finally:
            del self._pending[origin]
        if entry.parser is not None and self._on_crawl_delay is not None and host not in self._delays_sent:
            delay = entry.parser.crawl_delay(self.user_agent)
            if delay:
                self._delays_sent.add(host)
                await self._on_crawl_delay(host, float(delay))
        return entry

    async def _load(self, origin: str) -> _Entry:
        now = self._clock.now()
        shared = self._shared
        if shared is None:
            return await self._fetch(origin, None, now)
        kept = await _shared_or_claim(shared, origin)
        if kept is not None:
            return self._parsed(origin, *kept, now)
        try:
            entry = await self._fetch(origin, shared, now)
        except BaseException:
            await _ask(shared.release_robots_txt(origin), origin)
            raise
        if entry.status is None or entry.problem is not None:  # not read, so not shared: the processes
            await _ask(shared.release_robots_txt(origin), origin)  # waiting for it fetch it themselves now
        return entry

    async def _fetch(self, origin: str, shared: SharedRobots | None, now: float) -> _Entry:
        """Fetch ``origin``'s robots.txt; one that was read (a 2xx or 4xx answer: an entry with a status
        and no problem) is shared."""
        robots_url = origin + "/robots.txt"
        self.fetches += 1
        try:
            response = await self._fetcher.fetch(Request(robots_url))
        except (ContentTypeError, BodyTooLargeError):
            return _Entry(None, False, now + self._ttl)  # not a robots.txt we can read: no rules
        except AddressNotAllowedError:
            raise  # the host itself may not be fetched: that is the reason to report, not robots.txt
        except FetchError as exc:
            return _Entry(None, True, now + self._error_ttl, _without_url(str(exc), robots_url), exc)
        if response.status >= 500:
            return _Entry(None, True, now + self._error_ttl, f"HTTP {response.status}", status=response.status)
        # ``text`` decodes with the declared charset, or UTF-8 when it is unknown (charset=bogus); past
        # MAX_ROBOTS_CHARS the rest is ignored (RFC 9309 asks parsers to read at least 500 KiB).
        text = "" if response.status >= 400 else response.text[:MAX_ROBOTS_CHARS]
        if shared is not None:
            await _ask(shared.share_robots_txt(origin, response.status, text, self._ttl), origin)
        return self._parsed(origin, response.status, text, now)

    def _parsed(self, origin: str, status: int, text: str, now: float) -> _Entry:
        """The entry of a robots.txt read: a 4xx allows everything, else its rules."""
        if status >= 400:
            return _Entry(None, False, now + self._ttl, status=status)
        try:
            parser = Protego.parse(text)
        except Exception as exc:  # noqa: BLE001 - a hostile robots.txt must not fail every page of the host
            log.warning("%s/robots.txt cannot be parsed (%s: %s); no rules applied", origin, type(exc).__name__, exc)
            return _Entry(None, False, now + self._ttl, status=status)
        return _Entry(parser, False, now + self._ttl, status=status)


async def _shared_or_claim(shared: SharedRobots, origin: str) -> tuple[int, str] | None:
    """``origin``'s robots.txt from the store; else None once this process holds the claim on its fetch
    (or the store cannot answer, or the claimant shared nothing in :data:`CLAIM_SECONDS`): then fetch it.
    Wall-clock time: the wait is on other processes."""
    deadline = time.monotonic() + CLAIM_SECONDS
    while True:
        kept = await _ask(shared.shared_robots_txt(origin), origin)
        if kept is not None:
            return kept
        if await _ask(shared.claim_robots_txt(origin, CLAIM_SECONDS), origin) is not False:
            return None  # claimed here (or the store is down): this process fetches it
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(_CLAIM_POLL)


async def _ask(call: Awaitable[_T], origin: str) -> _T | None:
    """The shared store's answer; None when it cannot answer now (robots.txt is then fetched, or kept
    by this process only)."""
    try:
        return await call
    except (BackendUnavailableError, FrontierError) as exc:
        log.debug("%s/robots.txt: the shared store did not answer (%s)", origin, exc)
        return None


def _disallowed(url: str, request: Request | None) -> RobotsDisallowedError:
    return RobotsDisallowedError(f"{url}: disallowed by robots.txt", url=url, request=request)


def _without_url(message: str, url: str) -> str:
    """A fetch error's message without its leading ``url: `` (the caller names the URL itself)."""
    return message[len(url) + 2 :] if message.startswith(url + ": ") else message
