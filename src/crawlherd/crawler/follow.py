"""Following a fetched page's links in a crawl (``Crawler.crawl``): its links extracted, those the run
may follow made requests, and queued in the frontier up to the run's page budget -- robots.txt queued
before a new host's first link, a link robots.txt disallows reported at once (:mod:`.robots_work`).

Each link a run handled is remembered (``CrawlRun.links_done``): a site's menus and back links are met
on every page, and met again a link would change nothing -- its request a duplicate the frontier
refuses, or one already reported.
"""

from __future__ import annotations

import logging

from crawlherd.crawler.plan import in_domains, run_request
from crawlherd.crawler.robots_work import RobotsWork
from crawlherd.crawler.stream import CrawlRun
from crawlherd.errors import InvalidURLError, PageTooComplexError
from crawlherd.extract.links import extract_links_async
from crawlherd.page import OFF_LOOP_CHARS
from crawlherd.request import Request
from crawlherd.result import CrawlResult
from crawlherd.url import split_origin

__all__ = ["follow_links"]

log = logging.getLogger("crawlherd.crawler.crawler")

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", ""})
#: Links a crawl remembers as done (queued, found a duplicate, reported or out of bounds) before it
#: forgets them all: a site's menus are met on every page, and each would be a request made for nothing.
LINKS_REMEMBERED = 100_000


async def follow_links(result: CrawlResult, request: Request, run: CrawlRun, robots: RobotsWork) -> None:
    """Queue the links of a fetched page (before its lease is settled, so the frontier never looks
    idle while children are on their way)."""
    if result.content_type not in _HTML_TYPES:
        return
    depth = request.depth + 1
    if (depth > run.max_depth or run.enqueued >= run.max_pages) and len(result.body) <= OFF_LOOP_CHARS:
        result.defer_links()  # none to follow: read when asked for (a long page: in a thread, below)
        return
    try:
        links = await extract_links_async(result.text, result.final_url or request.url)
    except PageTooComplexError as exc:
        log.warning("%s: links not followed: %s", request.url, exc)
        result.links = []
        return
    result.links = links
    if depth > run.max_depth or run.enqueued >= run.max_pages:
        return
    if len(run.links_done) > LINKS_REMEMBERED:
        run.links_done.clear()
    children = _children(links, run, depth)
    if not children:  # every link handled before (a site's menus, back links): no room to take
        return
    queued = await _enqueue_children(children, request.host, run, robots if run.config.check_robots_txt else None)
    if queued and run.monitor is not None:
        run.monitor.add_queued(queued)


async def _enqueue_children(
    children: list[tuple[str, Request]], page_host: str, run: CrawlRun, robots: RobotsWork | None
) -> int:
    """Queue a page's links up to the run's ``max_pages`` (a link robots.txt disallows on the page's
    own host reported at once, robots.txt queued before a new host's first link): the work queued.
    With room for them all, in one :meth:`~crawlherd.frontier.base.EnqueueMany.enqueue_many` where the
    frontier has it (one call, or round trip, per page rather than per link)."""
    frontier = run.frontier
    done = run.links_done
    queued = 0
    async with run.room(len(children)) as room:
        batch = run.enqueue_many if room.reserved else None
        todo: list[Request] = []
        todo_links: list[str] = []
        for link, child in children:
            if room.full():
                break
            if robots is not None:
                if child.host != page_host:
                    run.queued_elsewhere.add(child.fingerprint)
                elif robots.report_disallowed(child, run):
                    done.add(link)
                    continue
                if child.host not in run.robots_hosts:
                    queued += await robots.queue(run, child)
            if batch is not None:
                todo.append(child)
                todo_links.append(link)
                continue
            if await frontier.enqueue_request(child):
                room.took()
                queued += 1
            done.add(link)
        if batch is not None and todo:
            for took in await batch(todo):
                if took:
                    room.took()
                    queued += 1
            done.update(todo_links)
    return queued


def _children(links: list[str], run: CrawlRun, depth: int) -> list[tuple[str, Request]]:
    """The requests of a page's links at ``depth`` that the run may follow (its allowed domains),
    each with its link; the links the run handled before are not looked at again."""
    allowed = run.allowed
    done = run.links_done
    children: list[tuple[str, Request]] = []
    for link in links:
        if link in done:
            continue
        if allowed is not None and not in_domains(_hostname(link), allowed):
            done.add(link)
            continue
        try:
            children.append((link, run_request(link, run, priority=-depth, depth=depth)))
        except InvalidURLError:
            done.add(link)
    return children


def _hostname(url: str) -> str:
    """``(urlsplit(url).hostname or "").lower()``, from the netloc alone for a host without brackets."""
    host = split_origin(url)[1].rpartition("@")[2]
    if "[" in host:
        from urllib.parse import urlsplit

        return (urlsplit(url).hostname or "").lower()
    return host.partition(":")[0].lower()
