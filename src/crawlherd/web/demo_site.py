"""The built-in demo site: a small job board on loopback that ``crawlherd demo`` and the tests crawl.

Everything it serves is generated from a seed, so it is the same on every run and it can tell what a
crawl must find (:meth:`DemoSite.expected_items`). Pages (all GET):

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

Every request is counted (:attr:`DemoSite.log`) with its time, path, query and status.

Run it by hand: ``python -m crawlherd.web.demo_site --port 8080``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import json
import random
import signal
import zlib
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import ConfigurationError

__all__ = [
    "DEFAULT_KEYWORDS",
    "DEFAULT_LOCATIONS",
    "DemoJob",
    "DemoSite",
    "JobBoard",
    "RequestLog",
    "ServedRequest",
]

DEFAULT_KEYWORDS: tuple[str, ...] = ("python", "rust", "devops", "frontend", "data")
DEFAULT_LOCATIONS: tuple[str, ...] = ("berlin", "london", "paris", "remote")

_TITLES = {
    "python": ("Python Developer", "Backend Engineer (Python)", "Django Developer"),
    "rust": ("Rust Engineer", "Systems Programmer (Rust)", "Embedded Rust Developer"),
    "devops": ("DevOps Engineer", "Site Reliability Engineer", "Platform Engineer"),
    "frontend": ("Frontend Developer", "React Engineer", "UI Engineer"),
    "data": ("Data Engineer", "Data Scientist", "Analytics Engineer"),
}
_LEVELS = ("Junior", "", "Senior", "Lead", "Staff")
_COMPANIES = (
    "Acme Analytics",
    "Blue Fjord",
    "Copperleaf",
    "Driftwood Labs",
    "Ember & Oak",
    "Fieldstone",
    "Gridline",
    "Harbor Systems",
    "Ironbark",
    "Juniper Works",
)
_PERKS = (
    "flexible hours",
    "a yearly learning budget",
    "four-day weeks in summer",
    "a modern laptop of your choice",
    "remote-friendly teams",
    "pension contributions",
)


@dataclass(frozen=True, slots=True)
class DemoJob:
    """One job posting. ``keywords`` are the searches it matches; ``location`` is a location slug."""

    id: int
    title: str
    company: str
    location: str
    salary: str
    description: str
    keywords: tuple[str, ...]

    @property
    def location_name(self) -> str:
        return self.location.capitalize()

    @property
    def path(self) -> str:
        return f"/jobs/{self.id}"


class JobBoard:
    """The demo site's data: pure, deterministic from ``seed``.

    For each keyword x location a number of jobs between ``min_jobs`` and ``max_jobs`` is made; about
    one in five also matches a second keyword, so two searches can share a posting.
    """

    def __init__(
        self,
        *,
        seed: int = 42,
        keywords: Iterable[str] = DEFAULT_KEYWORDS,
        locations: Iterable[str] = DEFAULT_LOCATIONS,
        min_jobs: int = 6,
        max_jobs: int = 24,
    ) -> None:
        self.keywords = tuple(k.strip().lower() for k in keywords)
        self.locations = tuple(loc.strip().lower() for loc in locations)
        if not self.keywords or not self.locations:
            raise ConfigurationError("JobBoard needs at least one keyword and one location")
        for word in (*self.keywords, *self.locations):
            if not word or not word.replace("-", "").isalnum():
                raise ConfigurationError(f"JobBoard keyword/location {word!r}: use letters, digits and '-' only")
        if not 0 <= min_jobs <= max_jobs:
            raise ConfigurationError(f"JobBoard: need 0 <= min_jobs <= max_jobs, got {min_jobs}, {max_jobs}")
        self.seed = seed
        rng = random.Random(seed)
        jobs: list[DemoJob] = []
        next_id = 1000
        for keyword in self.keywords:
            for location in self.locations:
                for _ in range(rng.randint(min_jobs, max_jobs)):
                    matches = [keyword]
                    if len(self.keywords) > 1 and rng.random() < 0.2:
                        matches.append(rng.choice([k for k in self.keywords if k != keyword]))
                    low = rng.randrange(35, 90) * 1000
                    level = rng.choice(_LEVELS)
                    role = rng.choice(_TITLES.get(keyword, (f"{keyword.capitalize()} Specialist",)))
                    company = rng.choice(_COMPANIES)
                    perks = ", ".join(rng.sample(_PERKS, 2))
                    jobs.append(
                        DemoJob(
                            id=next_id,
                            title=f"{level} {role}".strip(),
                            company=company,
                            location=location,
                            salary=f"EUR {low:,} - {low + rng.randrange(5, 30) * 1000:,}",
                            description=(
                                f"{company} is hiring in {location.capitalize()}. "
                                f"You will work on {keyword} with a small team. We offer {perks}."
                            ),
                            keywords=tuple(matches),
                        )
                    )
                    next_id += 1
        self.jobs: tuple[DemoJob, ...] = tuple(jobs)
        self._by_id = {job.id: job for job in jobs}

    def job(self, job_id: int) -> DemoJob | None:
        return self._by_id.get(job_id)

    def search(self, keyword: str, location: str) -> list[DemoJob]:
        """Every job matching ``keyword`` in ``location`` (case-insensitive), in id order."""
        kw, loc = keyword.strip().lower(), location.strip().lower()
        return [job for job in self.jobs if kw in job.keywords and job.location == loc]

    def page(self, keyword: str, location: str, page: int, page_size: int) -> list[DemoJob]:
        """One 1-based page of :meth:`search`; empty past the end (and for page < 1)."""
        if page < 1:
            return []
        start = (page - 1) * page_size
        return self.search(keyword, location)[start : start + page_size]

    def page_count(self, keyword: str, location: str, page_size: int) -> int:
        return -(-len(self.search(keyword, location)) // page_size)


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """One request the demo site answered."""

    time: float
    method: str
    path: str
    query: str
    status: int


@dataclass
class RequestLog:
    """Counters of the requests served, with timestamps (from the site's clock). Keeps the last
    ``max_entries`` requests (a long-running ``python -m`` server does not grow without bound)."""

    max_entries: int = 1_000_000
    entries: deque[ServedRequest] = field(init=False)

    def __post_init__(self) -> None:
        self.entries = deque(maxlen=self.max_entries)

    def __iter__(self) -> Iterator[ServedRequest]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def by_path(self) -> Counter[str]:
        """Requests per path (query string left out)."""
        return Counter(entry.path for entry in self.entries)

    def count(self, *, prefix: str = "", status: int | None = None) -> int:
        """Requests whose path starts with ``prefix`` (and with ``status`` when given)."""
        return sum(
            1 for entry in self.entries if entry.path.startswith(prefix) and (status is None or entry.status == status)
        )

    def clear(self) -> None:
        self.entries.clear()

    def as_dicts(self) -> list[dict[str, Any]]:
        """The entries as plain dicts (for JSON output)."""
        return [asdict(entry) for entry in self.entries]


class DemoSite:
    """The demo job board as an aiohttp app on loopback.

    ``DemoSite(*, seed=42, page_size=10, throttle_every=4, retry_after=1, crawl_delay=None, clock=None,
    **board_options)``; ``await site.start(host="127.0.0.1", port=0)`` (or ``async with``), then
    :attr:`url`. ``throttle_every=N`` makes about one ``/search`` URL in N answer 429 with
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
        if page_size < 1:
            raise ConfigurationError(f"DemoSite page_size must be >= 1, got {page_size}")
        if throttle_every < 0:
            raise ConfigurationError(f"DemoSite throttle_every must be >= 0, got {throttle_every}")
        if retry_after < 0:
            raise ConfigurationError(f"DemoSite retry_after must be >= 0, got {retry_after}")
        self.board = JobBoard(seed=seed, **board_options)
        self.seed = seed
        self.page_size = page_size
        self.throttle_every = throttle_every
        self.retry_after = retry_after
        self.crawl_delay = crawl_delay
        self.clock: Clock = clock or SystemClock()
        self.log = RequestLog()
        self._seen_urls: set[str] = set()
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
        """The aiohttp application (also usable with aiohttp's test server)."""
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/", self._home)
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/search", self._search)
        app.router.add_get("/browse/{keyword}/{location}", self._browse)
        app.router.add_get("/js/search", self._js_search)
        app.router.add_get("/api/jobs", self._api_jobs)
        app.router.add_get("/jobs/{job_id}", self._detail)
        app.router.add_get("/fail/search", self._fail)
        app.router.add_get("/private/{tail:.*}", self._private)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a free port) and return :attr:`url`."""
        if self._runner is not None:
            raise RuntimeError("DemoSite is already started")
        runner = web.AppRunner(self.make_app(), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
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

    def job_url(self, job: DemoJob | int) -> str:
        job_id = job.id if isinstance(job, DemoJob) else job
        return f"{self.url}/jobs/{job_id}"

    def expected_items(self, keyword: str, location: str) -> list[dict[str, Any]]:
        """What a crawl of this search must find: one dict per job with ``id``, ``url`` (absolute),
        and the listing's fields ``title``, ``company``, ``location``, ``salary``."""
        return [
            {
                "id": job.id,
                "url": self.job_url(job),
                "title": job.title,
                "company": job.company,
                "location": job.location_name,
                "salary": job.salary,
            }
            for job in self.board.search(keyword, location)
        ]

    def expected_detail(self, job_id: int) -> dict[str, Any]:
        """The fields of a detail page (the listing's plus ``description``)."""
        job = self.board.job(job_id)
        if job is None:
            raise KeyError(job_id)
        return {
            "title": job.title,
            "company": job.company,
            "location": job.location_name,
            "salary": job.salary,
            "description": job.description,
        }

    def totals(self, searches: Iterable[tuple[str, str]] | None = None) -> dict[str, int]:
        """Counts for ``searches`` (keyword, location) pairs, all of them by default: ``searches``,
        ``results`` (summed over searches), ``unique_jobs`` (a job found by two searches counts once),
        ``pages`` (listing pages with items)."""
        if searches is None:
            searches = [(k, loc) for k in self.board.keywords for loc in self.board.locations]
        pairs = list(searches)
        results = 0
        pages = 0
        unique: set[int] = set()
        for keyword, location in pairs:
            found = self.board.search(keyword, location)
            results += len(found)
            pages += self.board.page_count(keyword, location, self.page_size)
            unique.update(job.id for job in found)
        return {"searches": len(pairs), "results": results, "unique_jobs": len(unique), "pages": pages}

    def is_throttled(self, keyword: str, location: str, page: int) -> bool:
        """Whether the first request of this ``/search`` page answers 429."""
        if self.throttle_every == 0:
            return False
        key = f"{self.seed}|{keyword.strip().lower()}|{location.strip().lower()}|{page}".encode()
        return zlib.crc32(key) % self.throttle_every == 0

    # -- handlers --------------------------------------------------------------------------------

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

    async def _home(self, request: web.Request) -> web.Response:
        links = []
        for kw in self.board.keywords:
            for loc in self.board.locations:
                q = urlencode({"q": kw, "l": loc})
                links.append(
                    f'<li><a href="/search?{q}">{kw} in {loc}</a> '
                    f'(<a href="/browse/{kw}/{loc}">browse</a>, <a href="/js/search?{q}">js</a>)</li>'
                )
        return _html("Demo jobs", "<h1>Demo jobs</h1><ul class='searches'>" + "".join(links) + "</ul>")

    async def _robots(self, request: web.Request) -> web.Response:
        lines = ["User-agent: *", "Disallow: /private/"]
        if self.crawl_delay is not None:
            lines.append(f"Crawl-delay: {self.crawl_delay:g}")
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _page_number(self, request: web.Request) -> int:
        raw = request.query.get("page", "1")
        try:
            return int(raw)
        except ValueError:
            raise web.HTTPBadRequest(text=f"page must be an integer, got {raw!r}") from None

    async def _search(self, request: web.Request) -> web.Response:
        keyword, location = request.query.get("q", ""), request.query.get("l", "")
        page = self._page_number(request)
        key = f"{keyword.strip().lower()}|{location.strip().lower()}|{page}"
        first_time = key not in self._seen_urls
        self._seen_urls.add(key)
        if first_time and self.is_throttled(keyword, location, page):
            return web.Response(
                status=429, text="Too many requests, slow down\n", headers={"Retry-After": str(self.retry_after)}
            )
        jobs = self.board.page(keyword, location, page, self.page_size)
        return _html(f"{keyword} jobs in {location}", _listing(keyword, location, page, jobs))

    async def _browse(self, request: web.Request) -> web.Response:
        keyword, location = request.match_info["keyword"], request.match_info["location"]
        page = self._page_number(request)
        jobs = self.board.page(keyword, location, page, self.page_size)
        nav = ""
        if jobs and page < self.board.page_count(keyword, location, self.page_size):
            nxt = f"/browse/{quote(keyword)}/{quote(location)}?page={page + 1}"
            nav = f'<nav class="pager"><a rel="next" class="next" href="{html.escape(nxt)}">Next page</a></nav>'
        return _html(f"{keyword} jobs in {location}", _listing(keyword, location, page, jobs) + nav)

    async def _js_search(self, request: web.Request) -> web.Response:
        keyword, location = request.query.get("q", ""), request.query.get("l", "")
        body = (
            f"<h1>Jobs: {html.escape(keyword)} in {html.escape(location)}</h1>"
            '<div id="results" data-state="loading"></div>'
            f"<script>{_RENDER_SCRIPT}</script>"
        )
        return _html(f"{keyword} jobs in {location}", body)

    async def _api_jobs(self, request: web.Request) -> web.Response:
        keyword, location = request.query.get("q", ""), request.query.get("l", "")
        jobs = self.board.search(keyword, location)
        items = [
            {
                "id": job.id,
                "url": job.path,
                "title": job.title,
                "company": job.company,
                "location": job.location_name,
                "salary": job.salary,
            }
            for job in jobs
        ]
        return web.json_response({"query": {"q": keyword, "l": location}, "total": len(items), "items": items})

    async def _detail(self, request: web.Request) -> web.Response:
        try:
            job = self.board.job(int(request.match_info["job_id"]))
        except ValueError:
            job = None
        if job is None:
            raise web.HTTPNotFound(text="no such job")
        e = html.escape
        body = (
            f'<article class="job" data-id="{job.id}">'
            f'<h1 class="title">{e(job.title)}</h1>'
            f'<p><span class="company">{e(job.company)}</span> &middot; '
            f'<span class="location">{e(job.location_name)}</span> &middot; '
            f'<span class="salary">{e(job.salary)}</span></p>'
            f'<div class="description">{e(job.description)}</div>'
            f'<p class="tags">{" ".join(e(k) for k in job.keywords)}</p>'
            "</article>"
        )
        return _html(job.title, body)

    async def _fail(self, request: web.Request) -> web.Response:
        return web.Response(status=500, text="Internal error (this endpoint always fails)\n")

    async def _private(self, request: web.Request) -> web.Response:
        return _html("Private", "<p class='secret'>robots.txt asked you not to come here</p>")


def _html(title: str, body: str) -> web.Response:
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )
    return web.Response(text=page, content_type="text/html", charset="utf-8")


def _card(job: DemoJob) -> str:
    e = html.escape
    return (
        f'<article class="job-card" data-id="{job.id}">'
        f'<h2 class="title"><a class="job-link" href="{job.path}">{e(job.title)}</a></h2>'
        f'<span class="company">{e(job.company)}</span> '
        f'<span class="location">{e(job.location_name)}</span> '
        f'<span class="salary">{e(job.salary)}</span>'
        "</article>"
    )


def _listing(keyword: str, location: str, page: int, jobs: list[DemoJob]) -> str:
    head = f"<h1>Jobs: {html.escape(keyword)} in {html.escape(location)} (page {page})</h1>"
    if not jobs:
        return head + '<p class="empty">No jobs found.</p>'
    return head + '<div id="results">' + "".join(_card(job) for job in jobs) + "</div>"


# Builds the same markup as _card, with DOM calls (never innerHTML), then marks the list done.
_RENDER_SCRIPT = """
(function () {
  var params = new URLSearchParams(window.location.search);
  var api = '/api/jobs?' + new URLSearchParams({q: params.get('q') || '', l: params.get('l') || ''});
  var results = document.getElementById('results');
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  fetch(api).then(function (r) { return r.json(); }).then(function (data) {
    data.items.forEach(function (job) {
      var card = el('article', 'job-card');
      card.setAttribute('data-id', String(job.id));
      var h2 = el('h2', 'title');
      var a = el('a', 'job-link', job.title);
      a.setAttribute('href', job.url);
      h2.appendChild(a);
      card.appendChild(h2);
      card.appendChild(el('span', 'company', job.company));
      card.appendChild(document.createTextNode(' '));
      card.appendChild(el('span', 'location', job.location));
      card.appendChild(document.createTextNode(' '));
      card.appendChild(el('span', 'salary', job.salary));
      results.appendChild(card);
    });
    results.setAttribute('data-state', 'done');
  }).catch(function (err) {
    results.setAttribute('data-state', 'error');
    results.textContent = 'Could not load jobs: ' + err;
  });
})();
"""


async def _serve(host: str, port: int, seed: int, throttle_every: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    site = DemoSite(seed=seed, throttle_every=throttle_every)
    await site.start(host, port)
    try:
        totals = site.totals()
        print(f"demo site on {site.url}  ({totals['unique_jobs']} jobs, {totals['searches']} searches)", flush=True)
        print(json.dumps({"url": site.url, **totals}), flush=True)
        await stop.wait()
    finally:
        await site.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crawlherd.web.demo_site", description="Serve the demo job board.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--throttle-every", type=int, default=4, help="about 1 in N /search URLs answer 429 once")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port, args.seed, args.throttle_every))


if __name__ == "__main__":
    main()
