"""The demo job board served by aiohttp on loopback: :class:`DemoSite`.

Pages (all GET; the markup is in :mod:`crawlherd.demo.pages`):

``/``                                  home page with links to every search
``/search?q=KW&l=LOC&page=N``          listing, ``page_param`` pagination (1-based; a page past the end
                                       is a 200 with no items); the first request of some URLs answers
                                       429 with ``Retry-After`` (deterministic, see ``throttle_every``)
``/browse/KW/LOC?page=N``              the same listing with ``<a rel="next" class="next">`` links
``/js/search?q=KW&l=LOC``              an HTML shell whose script fetches ``/api/jobs`` and renders the
                                       cards into the DOM: plain HTTP sees no item
``/api/jobs?q=KW&l=LOC``               the JSON behind it
``/jobs/ID``                           detail page: title, company, location, salary, description
``/fail/search?...``                   always 500 (a site that fails every time)
``/private/...``                       disallowed by ``/robots.txt``
``/robots.txt``
``/ip``, ``/headers``, ``/cookies``    who asked, as httpbin answers: ``{"origin": client address}``, the
                                       request's headers, the cookies it sent
``/cookies/set?NAME=VALUE``            sets the cookies, then redirects to ``/cookies``

Every request is counted (:attr:`DemoSite.log`) with its time, path, query and status.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Iterable
from types import MethodType, TracebackType
from typing import Any, TypeVar

from aiohttp import web

from crawlherd.clock import Clock, SystemClock
from crawlherd.demo import pages
from crawlherd.demo.board import DemoJob, JobBoard
from crawlherd.demo.log import RequestLog, ServedRequest
from crawlherd.errors import ConfigurationError

__all__ = ["DemoSite"]

_Handler = Callable[["DemoSite", web.Request], Awaitable[web.StreamResponse]]
#: The GET routes of the site: (path, handler), in the order the handlers are declared.
_ROUTES: list[tuple[str, _Handler]] = []
_H = TypeVar("_H", bound=_Handler)


def _get(path: str) -> Callable[[_H], _H]:
    """Marks a handler of :class:`DemoSite` as the one for GET ``path`` (aiohttp's ``RouteTableDef``,
    for methods)."""

    def mark(handler: _H) -> _H:
        _ROUTES.append((path, handler))
        return handler

    return mark


class DemoSite:
    """The demo job board as an aiohttp app on loopback.

    ``DemoSite(*, seed=42, page_size=10, throttle_every=4, retry_after=1, crawl_delay=None, clock=None,
    **board_options)`` (``board_options``: the :class:`~crawlherd.demo.board.JobBoard` options);
    ``await site.start(host="127.0.0.1", port=0)`` (or ``async with``), then :attr:`url`.
    ``throttle_every=N`` makes about one ``/search`` URL in N answer 429 with
    ``Retry-After: retry_after`` on its first request (which ones depends on the seed); 0 turns it off.
    """

    def __init__(
        self,
        *,
        seed: int = 42,
        page_size: int = 10,
        throttle_every: int = 4,
        retry_after: int = 1,
        crawl_delay: float | None = None,
        clock: Clock | None = None,
        **board_options: Any,
    ) -> None:
        for name, value, least in (("page_size", page_size, 1), ("throttle_every", throttle_every, 0)):
            if value < least:
                raise ConfigurationError(f"DemoSite {name} must be >= {least}, got {value}")
        if retry_after < 0:
            raise ConfigurationError(f"DemoSite retry_after must be >= 0 seconds, got {retry_after}")
        self.board = JobBoard(seed=seed, **board_options)
        self.seed = seed
        self.page_size = page_size
        self.throttle_every = throttle_every
        self.retry_after = retry_after
        self.crawl_delay = crawl_delay
        self.clock: Clock = clock or SystemClock()
        self.log = RequestLog()
        self._seen_searches: set[tuple[str, str, int]] = set()
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL without a trailing slash, e.g. ``http://127.0.0.1:41234``."""
        if self._url is None:
            raise RuntimeError("DemoSite is not started: call `await site.start()` first")
        return self._url

    def make_app(self) -> web.Application:
        """The aiohttp application (also usable with aiohttp's test server): every handler marked
        :func:`_get`, at its path."""
        app = web.Application(middlewares=[self._count])
        for path, handler in _ROUTES:
            app.router.add_get(path, MethodType(handler, self))
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a free port) and return :attr:`url`."""
        if self._runner is not None:
            raise RuntimeError("DemoSite is already started")
        runner = web.AppRunner(self.make_app(), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound_host, bound_port = runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
        self._url = f"http://{shown}:{bound_port}"
        return self._url

    async def stop(self) -> None:
        """Stop serving. Idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> DemoSite:
        if self._runner is None:
            await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- the site's own truth --------------------------------------------------------------------

    def searches(self) -> list[tuple[str, str]]:
        """Every (keyword, location) of the board, keywords first."""
        return [(k, loc) for k in self.board.keywords for loc in self.board.locations]

    def job_url(self, job: DemoJob | int) -> str:
        """The absolute URL of a job's detail page."""
        job_id = job.id if isinstance(job, DemoJob) else job
        return f"{self.url}/jobs/{job_id}"

    def expected_items(self, keyword: str, location: str) -> list[dict[str, Any]]:
        """What a crawl of this search must find: one dict per job with ``id``, ``url`` (absolute),
        and the listing's fields ``title``, ``company``, ``location``, ``salary``; in listing order."""
        return [pages.card_fields(job) | {"url": self.job_url(job)} for job in self.board.search(keyword, location)]

    def expected_detail(self, job_id: int) -> dict[str, Any]:
        """The fields of a detail page (the listing's plus ``description``)."""
        job = self.board.job(job_id)
        if job is None:
            raise KeyError(job_id)
        listed = pages.card_fields(job)
        del listed["id"], listed["url"]
        return listed | {"description": job.description}

    def totals(self, searches: Iterable[tuple[str, str]] | None = None) -> dict[str, int]:
        """Counts for ``searches`` (keyword, location) pairs, all of them by default: ``searches``,
        ``results`` (summed over searches), ``unique_jobs`` (a job found by two searches counts once),
        ``pages`` (listing pages with items)."""
        pairs = self.searches() if searches is None else list(searches)
        found = [self.board.search(keyword, location) for keyword, location in pairs]
        return {
            "searches": len(pairs),
            "results": sum(len(jobs) for jobs in found),
            "unique_jobs": len({job.id for jobs in found for job in jobs}),
            "pages": sum(self.board.page_count(k, loc, self.page_size) for k, loc in pairs),
        }

    def is_throttled(self, keyword: str, location: str, page: int) -> bool:
        """Whether the first request of this ``/search`` page answers 429."""
        if self.throttle_every == 0:
            return False
        key = f"{self.seed}|{keyword.strip().lower()}|{location.strip().lower()}|{page}".encode()
        return zlib.crc32(key) % self.throttle_every == 0

    # -- the request log -------------------------------------------------------------------------

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        status = 500
        try:
            response: web.StreamResponse = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            self.log.entries.append(
                ServedRequest(self.clock.now(), request.method, request.path, request.query_string, status)
            )

    # -- home, robots, failures ------------------------------------------------------------------

    @_get("/")
    async def _home(self, request: web.Request) -> web.Response:
        return _html("Demo jobs", pages.home(self.searches()))

    @_get("/robots.txt")
    async def _robots(self, request: web.Request) -> web.Response:
        lines = ["User-agent: *", "Disallow: /private/"]
        if self.crawl_delay is not None:
            lines.append(f"Crawl-delay: {self.crawl_delay:g}")
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    @_get("/fail/search")
    async def _fail(self, request: web.Request) -> web.Response:
        return web.Response(status=500, text="Internal error (this endpoint always fails)\n")

    @_get("/private/{tail:.*}")
    async def _private(self, request: web.Request) -> web.Response:
        return _html("Private", "<p class='secret'>robots.txt asked you not to come here</p>")

    # -- who is asking: /ip, /headers, /cookies (httpbin's answers, for proxy and session examples) --

    @_get("/ip")
    async def _ip(self, request: web.Request) -> web.Response:
        return web.json_response({"origin": request.remote})

    @_get("/headers")
    async def _headers(self, request: web.Request) -> web.Response:
        return web.json_response({"headers": dict(request.headers)})

    @_get("/cookies")
    async def _cookies(self, request: web.Request) -> web.Response:
        return web.json_response({"cookies": dict(request.cookies)})

    @_get("/cookies/set")
    async def _set_cookies(self, request: web.Request) -> web.Response:
        """``/cookies/set?name=value``: sets the cookies, then redirects to ``/cookies``."""
        redirect = web.HTTPFound("/cookies")
        for name, value in request.query.items():
            redirect.set_cookie(name, value)
        raise redirect

    # -- listings: /search (page_param, the deliberate 429s) and /browse (next_link) -------------

    @_get("/search")
    async def _search(self, request: web.Request) -> web.Response:
        keyword, location = _query(request)
        page = _page_number(request)
        if self._first_request(keyword, location, page) and self.is_throttled(keyword, location, page):
            return web.Response(
                status=429, text="Too many requests, slow down\n", headers={"Retry-After": str(self.retry_after)}
            )
        jobs = self.board.page(keyword, location, page, self.page_size)
        return _html(f"{keyword} jobs in {location}", pages.listing(keyword, location, page, jobs))

    def _first_request(self, keyword: str, location: str, page: int) -> bool:
        key = (keyword.strip().lower(), location.strip().lower(), page)
        first = key not in self._seen_searches
        self._seen_searches.add(key)
        return first

    @_get("/browse/{keyword}/{location}")
    async def _browse(self, request: web.Request) -> web.Response:
        keyword, location = request.match_info["keyword"], request.match_info["location"]
        page = _page_number(request)
        jobs = self.board.page(keyword, location, page, self.page_size)
        body = pages.listing(keyword, location, page, jobs)
        if jobs and page < self.board.page_count(keyword, location, self.page_size):
            body += pages.next_link(keyword, location, page + 1)
        return _html(f"{keyword} jobs in {location}", body)

    # -- the JavaScript-rendered listing and its API ---------------------------------------------

    @_get("/js/search")
    async def _js_search(self, request: web.Request) -> web.Response:
        keyword, location = _query(request)
        return _html(f"{keyword} jobs in {location}", pages.js_shell(keyword, location))

    @_get("/api/jobs")
    async def _api_jobs(self, request: web.Request) -> web.Response:
        keyword, location = _query(request)
        items = [pages.card_fields(job) for job in self.board.search(keyword, location)]
        return web.json_response({"query": {"q": keyword, "l": location}, "total": len(items), "items": items})

    # -- detail pages ----------------------------------------------------------------------------

    @_get("/jobs/{job_id}")
    async def _detail(self, request: web.Request) -> web.Response:
        try:
            job = self.board.job(int(request.match_info["job_id"]))
        except ValueError:
            job = None
        if job is None:
            raise web.HTTPNotFound(text="no such job")
        return _html(job.title, pages.detail(job))


def _html(title: str, body: str) -> web.Response:
    return web.Response(text=pages.document(title, body), content_type="text/html", charset="utf-8")


def _query(request: web.Request) -> tuple[str, str]:
    return request.query.get("q", ""), request.query.get("l", "")


def _page_number(request: web.Request) -> int:
    raw = request.query.get("page", "1")
    try:
        return int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"page must be an integer, got {raw!r}") from None
