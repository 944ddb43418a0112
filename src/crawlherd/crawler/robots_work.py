"""robots.txt in a run that obeys it (``CrawlerRunConfig(check_robots_txt=True)``), as the crawler
does it: a host's robots.txt queued as work of its host before its first page (:meth:`RobotsWork.queue`)
and fetched by the slot that takes it (:meth:`RobotsWork.fetch`), each page checked against it
(:meth:`RobotsWork.check`), a link it disallows reported without a hand-out
(:meth:`RobotsWork.report_disallowed`), and its Crawl-delay given to the send gate and the frontier.
See ``docs/architecture.md`` ("robots.txt is work of its host")."""

from __future__ import annotations

from crawlherd.clock import Clock
from crawlherd.crawler.plan import failed
from crawlherd.crawler.stream import CrawlRun
from crawlherd.errors import FetchError
from crawlherd.fetch.gate import HostGate
from crawlherd.fetch.robots import RobotsCache, robots_request
from crawlherd.request import Request
from crawlherd.result import CrawlResult

__all__ = ["RobotsWork"]


class RobotsWork:
    """robots.txt for the crawler's runs: ``RobotsWork(robots, gate, clock)`` -- the crawler's robots
    cache, send gate and clock."""

    def __init__(self, robots: RobotsCache, gate: HostGate, clock: Clock) -> None:
        self.robots = robots
        self.gate = gate
        self.clock = clock

    async def check(self, request: Request, run: CrawlRun) -> None:
        """Raise RobotsDisallowedError (or RobotsUnavailableError) when robots.txt keeps ``request`` out;
        its host's Crawl-delay to the frontier, once."""
        await self.robots.check(request.url, request)
        if request.host not in run.delayed_hosts:
            await self._crawl_delay(request, run)

    async def fetch(self, request: Request, run: CrawlRun) -> CrawlResult:
        """A host's robots.txt, scheduled by the frontier before its pages (:meth:`queue`):
        fetched into the robots cache, its Crawl-delay given to the frontier before the lease is
        settled (which lets the pages go). The result is the run's, not a page: the stream drops it.
        A robots.txt that cannot be read is no failure here -- each page reports why, from the cache."""
        try:
            status, problem = await self.robots.load(request.url)
        except FetchError as exc:  # the host itself may not be fetched: its pages will say so
            self.gate.answered(request.host)
            return failed(request.url, exc, request)
        await self._crawl_delay(request, run)  # first: the host's next request is spaced by it already
        self.gate.answered(request.host)
        # Its status is shown (the monitor counts this work), but not a 429/503: the robots cache has
        # the answer already (RFC 9309), the dispatcher must not re-fetch it as a rate-limited page.
        shown = None if status in (429, 503) else status
        return CrawlResult(
            url=request.url, success=problem is None, status_code=shown, error_message=problem,
            error_type=None if problem is None else "RobotsUnavailableError", request=request, depth=request.depth,
        )

    async def queue(self, run: CrawlRun, request: Request) -> int:
        """Before the first request of a host is queued: its robots.txt, as work of the host that the
        frontier hands out first. 1 when it was queued (the frontier queues one per host), else 0."""
        host = request.host
        if not run.config.check_robots_txt or host in run.robots_hosts:
            return 0
        run.robots_hosts.add(host)
        return int(await run.frontier.enqueue_robots(robots_request(request.url, priority=request.priority)))

    def report_disallowed(self, child: Request, run: CrawlRun) -> bool:
        """A link of the page just fetched that its host's robots.txt (known: the page was fetched after
        it) disallows is reported at once, without the frontier: handing it out would cost the host a
        delay with nothing sent. True when it was (or was already) reported; False for the frontier."""
        error = self.robots.known_disallowed(child.url, child)
        if error is None:
            return False
        fp = child.fingerprint
        if fp in run.queued_elsewhere:  # queued before robots.txt was known: the frontier reports it
            return False
        if fp not in run.reported_fps:
            run.reported_fps.add(fp)
            run.enqueued += 1
            run.reported.append(failed(child.url, error, child))
        return True

    async def _crawl_delay(self, request: Request, run: CrawlRun) -> None:
        """Once per host and run: robots.txt's Crawl-delay, when longer than the run's, to the send gate
        and the frontier."""
        host = request.host
        if host not in run.delayed_hosts:
            run.delayed_hosts.add(host)
            delay = self.robots.crawl_delay(request.url)
            if delay and delay > run.base_delay:
                self.gate.set_host_delay(host, delay)
                await run.frontier.set_host_policy(host, delay=delay)
                # the request that brought it (robots.txt) went out under the run's delay: the next one
                # waits for this one from now
                await run.frontier.block_host(host, self.clock.now() + delay)
