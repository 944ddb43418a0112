"""``HttpFetcher``: the default fetcher, on aiohttp with one shared connection pool.

Every fetch keeps to :class:`~crawlherd.fetch.base.FetchLimits`:

- connect / read / total timeouts (connect: aiohttp's; read and total per hop: the fetcher's watchdog;
  per request via ``meta["crawlherd.timeouts"]``, whose total is aiohttp's);
- the body is streamed and the fetch aborted as soon as it passes ``max_body_size``; a declared
  ``Content-Length`` over the limit is refused before reading anything;
- decompression is done here, not by aiohttp, so the *decompressed* bytes are counted against the same
  limit and a gzip bomb is stopped after ``max_body_size`` bytes of output;
- redirects are followed by hand, at most ``max_redirects``, and the address guard runs on every hop;
- the content type of a final non-error response must be in ``allowed_content_types``;
- a request fetched under a session (``meta["crawlherd.session"]``, :mod:`crawlherd.fetch.session`)
  goes through its proxy (:mod:`crawlherd.fetch.proxies`) with its headers and cookies, and the cookies
  the site set come back in the result. Without one, no cookie is kept or sent.

The redirect loop and the limits on the answer are :mod:`crawlherd.fetch.hops`'s, shared by every
fetcher; this module makes each hop on aiohttp (the first in ``_fetch``, the others in ``_hop``).

aiohttp and OS errors come out as :class:`~crawlherd.errors.FetchError` subclasses (:mod:`crawlherd.fetch.http_errors`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import re
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from crawlherd._aio import cancel_and_wait
from crawlherd.errors import FetchError, FetchTimeoutError
from crawlherd.fetch.base import FetchLimits, Response, Timeouts, result_of_fetch
from crawlherd.fetch.gate import SendGate, check_veto
from crawlherd.fetch.guard import Network, address_allowed, parse_networks, refusal
from crawlherd.fetch.hops import (
    REDIRECT_STATUSES,
    AcceptedTypes,
    Hop,
    SendHop,
    blame,
    check_length,
    follow,
    read_body,
    redirect_location,
)
from crawlherd.fetch.http_errors import translate
from crawlherd.fetch.proxies import PROXY_ERRORS, ProxyRoutes
from crawlherd.fetch.session import SessionMeta, cookie_header, merge_cookies, parse_set_cookie, session_of
from crawlherd.request import Request
from crawlherd.result import CrawlResult

if TYPE_CHECKING:
    from multidict import CIMultiDictProxy

__all__ = ["HttpFetcher", "ResponseHeaders"]

_IPV4_CHARS = frozenset("0123456789.")
_T = TypeVar("_T")


class ResponseHeaders(Mapping[str, str]):
    """A response's headers with lower-case keys (the last of repeated headers wins), copied out of
    aiohttp's multidict on first use: most results are never asked for a header."""

    __slots__ = ("_copy", "_raw")

    def __init__(self, raw: CIMultiDictProxy[str]) -> None:
        self._raw: CIMultiDictProxy[str] | None = raw
        self._copy: dict[str, str] | None = None

    def _dict(self) -> dict[str, str]:
        copy = self._copy
        if copy is None:
            assert self._raw is not None
            copy = self._copy = {k.lower(): v for k, v in self._raw.items()}
            self._raw = None
        return copy

    def __getitem__(self, key: str) -> str:
        return self._dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        raw = self._raw
        if raw is not None and key.isascii() and key.islower():  # one header: no copy of them all yet
            values = raw.getall(key, None)
            return values[-1] if values else default  # the last one, as in the copy
        return self._dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __eq__(self, other: object) -> bool:
        return self._dict() == (dict(other) if isinstance(other, Mapping) else other)

    def __repr__(self) -> str:
        return repr(self._dict())

    def __reduce__(self) -> tuple[type[dict[str, str]], tuple[dict[str, str]]]:
        return dict, (self._dict(),)  # pickled, copied: a plain dict


def _response(request: Request, url: str, status: int, headers: Mapping[str, str], body: bytes, encoding: str,
              elapsed: float, redirects: tuple[str, ...]) -> Response:
    return Response(url, status, headers, body, request, elapsed, redirects, None, encoding)


class _GuardedResolver(AbstractResolver):
    """Resolves through aiohttp's default resolver and refuses non-public answers."""

    def __init__(self, networks: tuple[Network, ...]) -> None:
        self._inner = DefaultResolver()
        self._networks = networks

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        infos = await self._inner.resolve(host, port, family)
        for info in infos:
            if not address_allowed(info["host"], self._networks):
                raise refusal(f"http://{host}:{port}/", host, info["host"])
        return infos

    async def close(self) -> None:
        await self._inner.close()


#: ``total`` of HttpFetcher._timeout when the watchdog keeps the total timeout, and a deadline not set.
_WATCHED = float("inf")
#: A session's way for a hop: HTTP proxy or None, headers, cookie jar, cookies set (see HttpFetcher._hop).
_Via = tuple["str | None", dict[str, str], list[Any], list[Any]]

# The politeness key (``host[:port]``, as the frontier spells it) of the hop being sent, per task.
_HOP_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("crawlherd_hop_host", default="")


def _gated_request_class(fetcher: HttpFetcher) -> type[aiohttp.ClientRequest]:
    """A ClientRequest that consults the fetcher's send gate once its connection is ready, right
    before the request is written: per-host spacing then holds at the moment requests leave."""

    class GatedRequest(aiohttp.ClientRequest):
        def send(self, conn: Any) -> Coroutine[Any, Any, aiohttp.ClientResponse]:
            # Not a coroutine itself: when the gate lets the request go at once (the common case),
            # aiohttp awaits ClientRequest.send directly, without one more frame per request.
            gate = fetcher.send_gate
            if gate is not None:
                wait = gate(_HOP_HOST.get())
                if wait is not None:
                    return self._send_after(wait, conn)
            check_veto(self.url)
            return super().send(conn)

        async def _send_after(self, wait: Awaitable[None], conn: Any) -> aiohttp.ClientResponse:
            progress = fetcher._progress()
            if progress is not None:
                progress[0] = float("inf")  # waiting for politeness is not a stalled read
            try:
                await wait
            finally:
                if progress is not None:
                    progress[0] = time.monotonic()
            check_veto(self.url)
            return await super().send(conn)

    return GatedRequest


class HttpFetcher:
    """Fetch over HTTP(S) with aiohttp. ``HttpFetcher(limits=FetchLimits(...), *, max_connections=100,
    headers=None)``; use it as an async context manager (or call :meth:`close`). One
    ``ClientSession`` and one connector serve every request, so connections are reused."""

    #: It renders nothing: no screenshots.
    takes_screenshots = False

    def __init__(
        self,
        limits: FetchLimits | None = None,
        *,
        max_connections: int = 100,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if max_connections < 0:
            raise ValueError(f"max_connections={max_connections!r}: must be >= 0 (0 means unlimited)")
        self.limits = limits or FetchLimits()
        self._max_connections = max_connections
        self._headers = dict(headers or {})
        self._networks = parse_networks(self.limits.allowed_networks)
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float, float, float], aiohttp.ClientTimeout] = {}
        # Always passed explicitly: aiohttp reads ``timeout=None`` as "no timeout at all". The limits'
        # total timeout is the watchdog's, not aiohttp's: a timer handle and timer contexts per page.
        self._default_timeout = self._timeout(self.limits.connect_timeout, self.limits.read_timeout, _WATCHED)
        self._closed = False
        self._routes: ProxyRoutes | None = None
        # Timeout watchdog: fetching task -> [time of last progress, read timeout, the hop's deadline,
        # the total timeout it keeps, the hop's URL]. A task that made no progress for its read timeout,
        # or whose hop passed its deadline, is cancelled and its fetch raises FetchTimeoutError.
        self._watch: dict[asyncio.Task[Any], list[Any]] = {}
        self._stalled: dict[asyncio.Task[Any], str] = {}  # cancelled task -> "read" or "total"
        self._watchdog: asyncio.Task[None] | None = None
        self._tick = min(1.0, max(0.05, min(self.limits.read_timeout, self.limits.total_timeout) / 10))
        self._types = AcceptedTypes()  # the allow-list, with the charsets of the values it let through
        #: Consulted with the host (``host[:port]``, the frontier's key) right before each request --
        #: every redirect hop too -- is written to its connection (see SendGate). The Crawler uses it
        #: to space requests to a host at the moment they leave.
        self.send_gate: SendGate | None = None

    def __repr__(self) -> str:
        return f"<HttpFetcher limits={self.limits!r}>"

    async def __aenter__(self) -> HttpFetcher:
        self._open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _open(self) -> aiohttp.ClientSession:
        session = self._session
        if session is not None:
            return session
        if self._closed:
            raise FetchError("this HttpFetcher is closed; create a new one")
        limits = self.limits
        guarded = not limits.allow_private_addresses
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            ttl_dns_cache=60,
            resolver=_GuardedResolver(self._networks) if guarded else None,
        )
        headers = {"User-Agent": limits.user_agent, "Accept-Encoding": "gzip, deflate", **self._headers}
        self._session = session = aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            timeout=self._default_timeout,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            request_class=_gated_request_class(self),
        )
        self._watchdog = asyncio.get_running_loop().create_task(self._watch_reads(), name="crawlherd-read-watchdog")
        return session

    def _timeout(self, connect: float, read: float, total: float) -> aiohttp.ClientTimeout:
        """aiohttp's timeouts for these; ``total=_WATCHED``: the total timeout is the watchdog's."""
        key = (connect, read, total)
        t = self._timeouts.get(key)
        if t is None:
            # No sock_read here: aiohttp re-arms a timer on every chunk received (two timer-heap
            # operations per page); the read timeout is kept by this fetcher's watchdog instead.
            t = self._timeouts[key] = aiohttp.ClientTimeout(total=None if total == _WATCHED else total, connect=connect)
        return t

    async def close(self) -> None:
        self._closed = True
        watchdog, self._watchdog = self._watchdog, None
        await cancel_and_wait(watchdog)
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        routes, self._routes = self._routes, None
        if routes is not None:
            await routes.close()

    async def _watch_reads(self) -> None:
        watch = self._watch
        stalled = self._stalled
        while True:
            await asyncio.sleep(self._tick)
            now = time.monotonic()
            for task, (last, limit, deadline, _, _) in list(watch.items()):
                if task in stalled:
                    continue
                if now - last > limit:
                    stalled[task] = "read"
                    task.cancel()
                elif now > deadline:
                    stalled[task] = "total"
                    task.cancel()

    def _progress(self) -> list[Any] | None:
        """The watchdog entry of the current task (the send gate pauses it while waiting)."""
        task = asyncio.current_task()
        return None if task is None else self._watch.get(task)

    # -- fetch --------------------------------------------------------------------------------------

    async def fetch(self, request: Request) -> Response:
        return await self._fetch(request, _response)

    def fetch_result(self, request: Request) -> Coroutine[Any, Any, CrawlResult]:
        """Like :meth:`fetch`, but the :class:`~crawlherd.result.CrawlResult` the crawler reports, built
        straight from the aiohttp response (no :class:`Response` in between; the headers are copied
        when first read). Not a coroutine function itself: the crawler awaits the fetch directly.
        When a subclass (or the instance) replaced :meth:`fetch` alone, that ``fetch`` is called."""
        if type(self).fetch is not _OWN_FETCH or "fetch" in self.__dict__:
            return result_of_fetch(self, request)
        return self._fetch(request, CrawlResult.fetched)

    async def _fetch(self, request: Request, build: Callable[..., _T]) -> _T:
        """Fetch ``request``; ``build(request, final_url, status, headers, body, encoding, elapsed,
        redirects)`` makes what is returned."""
        session = self._session or self._open()
        limits = self.limits
        timeout = self._default_timeout
        read_timeout = limits.read_timeout
        total = limits.total_timeout  # kept by the watchdog; a request's own timeouts: by aiohttp
        meta = request._meta  # noqa: SLF001 - not request.meta, which makes a dict for every request
        if meta and meta.get("crawlherd.timeouts"):
            t = Timeouts.of(request, limits)
            read_timeout = t.read
            timeout = self._timeout(t.connect, t.read, t.total)
            total = _WATCHED
        task = asyncio.current_task()
        if task is None:
            raise FetchError("HttpFetcher.fetch must run inside an asyncio task", url=request.url, request=request)
        started = time.perf_counter()
        url = request.url
        progress: list[Any] = [time.monotonic(), read_timeout, _WATCHED, total, url]
        self._watch[task] = progress
        cancelling = task.cancelling()  # a cancellation from elsewhere must get through, a stall's or not
        under = session_of(meta)
        try:
            if under is not None:
                return await self._fetch_under(under, session, request, timeout, progress, build)
            # The first hop is made here (_hop's work, without its coroutine) and a final answer built
            # from it: a page that is not redirected -- most -- needs no redirect loop. A redirect goes
            # on in follow(), which makes the other hops.
            try:
                if not limits.allow_private_addresses:
                    self._guard_literal(url)
                self._hop_begins(progress, url, request.host)
                async with session.request(
                    request.method, _sendable(url), data=request.body,
                    headers=request._headers or None,  # noqa: SLF001
                    allow_redirects=False, timeout=timeout,
                ) as resp:
                    head = self._head(resp, url, request)
                    if isinstance(head, str):
                        raw = resp.headers
                        coding = raw.get("Content-Encoding")
                        data = await read_body(limits, resp.content, coding, url, request, progress)
                        return build(request, url, resp.status, ResponseHeaders(raw), data, head,
                                     time.perf_counter() - started, ())
            except FetchError as exc:
                blame(exc, url, request)
                raise
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise translate(exc, url, request, timeout) from None
            guard = None if limits.allow_private_addresses else self._guard_literal
            send = self._hop_sender(session, request, timeout, progress)
            hop = await follow(send, request, limits, guard=guard, answered=head, started=started)
            return build(request, hop.url, hop.status, hop.headers, hop.body, hop.encoding, hop.elapsed, hop.redirects)
        except asyncio.CancelledError:
            why = self._stalled.pop(task, None)
            if why is not None:
                if task.uncancel() > cancelling:  # cancelled from elsewhere too (a stop): that goes on
                    raise
                hop_url = progress[4]
                message = (
                    f"{hop_url}: read timeout ({read_timeout:g} s without data)" if why == "read"
                    else f"{hop_url}: total timeout ({total} s)"
                )
                raise FetchTimeoutError(message, url=hop_url, request=request) from None
            raise
        finally:
            self._watch.pop(task, None)
            if self._stalled:
                self._stalled.pop(task, None)

    def _hop_sender(
        self, session: aiohttp.ClientSession, request: Request, timeout: aiohttp.ClientTimeout, progress: list[Any],
        via: _Via | None = None,
    ) -> SendHop:
        """The hops of ``request``'s fetch, for :func:`~crawlherd.fetch.hops.follow` (see :meth:`_hop`)."""
        return functools.partial(self._hop, session, request, timeout, progress, via)

    async def _hop(
        self, session: aiohttp.ClientSession, request: Request, timeout: aiohttp.ClientTimeout, progress: list[Any],
        via: _Via | None, url: str, method: str, body: bytes | None, host: str,
    ) -> Hop:
        """One hop of ``request``'s fetch: sent without following its redirect, its answer read within
        the limits (:mod:`crawlherd.fetch.hops`), aiohttp's and the OS's errors translated. ``via``:
        a session's (HTTP proxy or None, headers, cookie jar, cookies set -- both updated per hop)."""
        self._hop_begins(progress, url, host)
        headers = request._headers or None  # noqa: SLF001 - not request.headers, which makes a dict
        proxy = None
        if via is not None:
            proxy, base, jar, _ = via
            cookie = cookie_header(jar, url) if jar else None
            headers = {**base, "Cookie": cookie} if cookie else base
        try:
            async with session.request(
                method, url, data=body, headers=headers, allow_redirects=False, timeout=timeout, proxy=proxy
            ) as resp:
                raw = resp.headers
                if via is not None and "Set-Cookie" in raw:
                    got = parse_set_cookie(raw.getall("Set-Cookie"), url)
                    via[2][:] = merge_cookies(via[2], got)
                    via[3].extend(got)
                head = self._head(resp, url, request)
                if isinstance(head, Hop):
                    return head
                data = await read_body(self.limits, resp.content, raw.get("Content-Encoding"), url, request, progress)
                return Hop(resp.status, None, url, ResponseHeaders(raw), data, head)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise translate(exc, url, request, timeout) from None
        except PROXY_ERRORS as exc:  # a SOCKS proxy's refusal (bad credentials, no route)
            raise FetchError(f"{url}: the proxy refused the request ({exc})", url=url, request=request) from None

    @staticmethod
    def _hop_begins(progress: list[Any], url: str, host: str) -> None:
        """A hop to ``url`` (politeness key ``host``) is about to be sent: its watchdog entry and send-gate key."""
        progress[0] = now = time.monotonic()
        progress[2] = now + progress[3]  # the total timeout runs per hop, as aiohttp's did
        progress[4] = url
        _HOP_HOST.set(host)

    def _head(self, resp: aiohttp.ClientResponse, url: str, request: Request) -> Hop | str:
        """What the status and headers of a hop's answer say: a redirect (its Hop), or for a final answer
        its charset, once the limits on them passed (content type, declared length)."""
        status = resp.status
        raw = resp.headers
        if status in REDIRECT_STATUSES:  # a 200 asks no header
            location = redirect_location(status, raw.get("Location"))
            if location is not None:
                return Hop(status, location)
        limits = self.limits
        charset = self._types.charset(limits, raw.get("Content-Type", ""), status, url, request)
        check_length(limits, resp.content_length, url, request)
        return charset

    async def _fetch_under(
        self, under: SessionMeta, session: aiohttp.ClientSession, request: Request, timeout: aiohttp.ClientTimeout,
        progress: list[Any], build: Callable[..., _T],
    ) -> _T:
        """A fetch under a session: its proxy, headers and cookies; the cookies set come back."""
        proxy = under.get("proxy") or None
        routes = self._routes
        if routes is None:
            routes = self._routes = ProxyRoutes(self.limits, self._networks, dict(session.headers))
        guard: Any = None if self.limits.allow_private_addresses else self._guard_literal
        if proxy is not None:
            session = routes.session_for(proxy, session, session._request_class)  # noqa: SLF001
            guard = None if self.limits.allow_private_addresses else (lambda url: routes.check(url, proxy))
        headers = {**under.get("headers", {}), **(request._headers or {})}  # noqa: SLF001
        jar = list(under.get("cookies", []))
        set_cookies: list[Any] = []
        send = self._hop_sender(
            session, request, timeout, progress,
            via=(None if proxy is None or routes.is_socks(proxy) else proxy, headers, jar, set_cookies),
        )
        hop = await follow(send, request, self.limits, guard=guard)
        out = build(request, hop.url, hop.status, hop.headers, hop.body, hop.encoding, hop.elapsed, hop.redirects)
        out.cookies = set_cookies  # type: ignore[attr-defined]
        return out

    def _guard_literal(self, url: str) -> None:
        """Check an IP-literal host before connecting (names are checked by the resolver)."""
        rest = url[url.find("//") + 2 :]
        netloc = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
        if netloc.startswith("["):
            host = netloc[1 : netloc.find("]")]
        else:
            host = netloc.rsplit(":", 1)[0]
            if not host or not set(host) <= _IPV4_CHARS:
                return
        try:
            ok = address_allowed(host, self._networks)
        except ValueError:
            return  # not an address after all: aiohttp reports the bad URL
        if not ok:
            raise refusal(url, host, host)


def _sendable(url: str) -> str | URL:
    """``url`` as aiohttp is to send it: a ``yarl.URL`` taken as already encoded when quoting it would
    change nothing (a plain ``http(s)://host[:port]/path?query`` of unreserved and delimiter characters,
    a lower-case host, no ``%`` escape for yarl to re-normalise, no ``/.`` dot segment for it to remove),
    so that aiohttp does not quote it again -- a third of its work on a URL, some 8 µs a page. Any
    other URL goes as the string, quoted by aiohttp as before."""
    if _PRE_ENCODED.match(url) is None or "/." in url:
        return url
    return URL(url, encoded=True)


_PRE_ENCODED = re.compile(r"https?://[a-z0-9.-]+(?::[1-9][0-9]{0,4})?/[A-Za-z0-9/:@!$&'()*+,;=._~?-]*\Z")


#: HttpFetcher's own fetch, taken now: the module's name may be rebound later (a test's routing subclass).
_OWN_FETCH = HttpFetcher.fetch
