"""A job board whose listings only JavaScript fills, on loopback: the browser pages' test site.

- ``/scroll?q=KW``: an infinite-scroll listing -- the page asks ``/api/jobs`` for the first batch, and
  for the next one each time it is scrolled to its bottom; nothing more once the API says so.
- ``/more?q=KW``: a "load more" listing -- the first batch, then a ``button#more`` that fetches the next
  one, removed after the last.
- ``/ready``: a page that becomes ready late (``window.appReady`` and ``#ready``, after ``delay`` ms).
- ``/blocked``: a 403 block page; ``/captcha``: a 200 page that asks to solve a captcha.
- ``/cookies``: shows the ``Cookie`` header it got and sets ``seen=<n>``.

Every job of a keyword is ``JsListing.jobs(keyword)``: the site's truth. Each item is an
``li.job`` with an ``a.title`` link to ``/job/<keyword>-<n>``; the list is tall (each item 200 px),
so the listing must really be scrolled. The server keeps what it was asked (``api_calls``, ``headers``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

__all__ = ["JsListing"]

_PAGE = """<!doctype html>
<html><head><title>%(title)s</title>
<style>body{font-family:sans-serif;margin:0} li.job{height:200px;border-bottom:1px solid #ccc}
button#more{font-size:20px;margin:20px}</style></head>
<body><h1>%(title)s</h1><ul id="jobs"></ul>%(button)s
<script>
const q = new URLSearchParams(location.search).get('q') || '';
let offset = 0, done = false, busy = false;
async function load() {
  if (done || busy) return;
  busy = true;
  const r = await fetch('/api/jobs?q=' + encodeURIComponent(q) + '&offset=' + offset);
  const data = await r.json();
  for (const job of data.jobs) {
    const li = document.createElement('li');
    li.className = 'job';
    li.innerHTML = '<a class="title" href="' + job.url + '">' + job.title + '</a>';
    document.getElementById('jobs').appendChild(li);
  }
  offset += data.jobs.length;
  done = !data.more;
  busy = false;
  const button = document.getElementById('more');
  if (done && button) button.remove();
}
%(trigger)s
load();
</script></body></html>"""

_SCROLL_TRIGGER = """window.addEventListener('scroll', () => {
  if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 50) load();
});"""
_MORE_TRIGGER = "document.getElementById('more').addEventListener('click', load);"

_READY = """<!doctype html><html><body><p id="state">loading</p><script>
setTimeout(() => {
  window.appReady = true;
  const p = document.createElement('p'); p.id = 'ready'; p.textContent = 'ready'; document.body.appendChild(p);
}, %(delay)d);
</script></body></html>"""


class JsListing:
    """The site: ``per_keyword`` jobs per keyword, served ``batch`` at a time."""

    def __init__(self, *, per_keyword: int = 23, batch: int = 5, api_delay: float = 0.0) -> None:
        self.per_keyword = per_keyword
        self.batch = batch
        self.api_delay = api_delay
        self.api_calls: list[tuple[str, int]] = []
        self.headers: list[dict[str, str]] = []
        self.remotes: list[str | None] = []  # the client address of each /cookies visit
        self.visits = 0

    def jobs(self, keyword: str) -> list[dict[str, str]]:
        return [{"url": f"/job/{keyword}-{n}", "title": f"{keyword.title()} job {n}"}
                for n in range(1, self.per_keyword + 1)]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/scroll", self.scroll)
        app.router.add_get("/more", self.more)
        app.router.add_get("/api/jobs", self.api)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/blocked", self.blocked)
        app.router.add_get("/captcha", self.captcha)
        app.router.add_get("/cookies", self.cookies)
        app.router.add_get("/job/{id}", self.job)
        return app

    async def scroll(self, request: web.Request) -> web.Response:
        html = _PAGE % {"title": "Scroll listing", "button": "", "trigger": _SCROLL_TRIGGER}
        return web.Response(text=html, content_type="text/html")

    async def more(self, request: web.Request) -> web.Response:
        html = _PAGE % {"title": "Load-more listing", "button": '<button id="more">Load more</button>',
                        "trigger": _MORE_TRIGGER}
        return web.Response(text=html, content_type="text/html")

    async def api(self, request: web.Request) -> web.Response:
        keyword = request.query.get("q", "")
        offset = int(request.query.get("offset", "0"))
        self.api_calls.append((keyword, offset))
        if self.api_delay:
            await asyncio.sleep(self.api_delay)
        jobs = self.jobs(keyword)
        chunk = jobs[offset : offset + self.batch]
        body: dict[str, Any] = {"jobs": chunk, "more": offset + len(chunk) < len(jobs)}
        return web.Response(text=json.dumps(body), content_type="application/json")

    async def ready(self, request: web.Request) -> web.Response:
        delay = int(request.query.get("delay", "300"))
        return web.Response(text=_READY % {"delay": delay}, content_type="text/html")

    async def blocked(self, request: web.Request) -> web.Response:
        html = "<html><body style='background:#c00;color:#fff'><h1>Access denied</h1></body></html>"
        return web.Response(status=403, text=html, content_type="text/html")

    async def captcha(self, request: web.Request) -> web.Response:
        html = "<html><body><h1>Please solve the captcha</h1><div class='g-recaptcha'></div></body></html>"
        return web.Response(text=html, content_type="text/html")

    async def cookies(self, request: web.Request) -> web.Response:
        self.visits += 1
        self.headers.append(dict(request.headers))
        self.remotes.append(request.remote)
        cookie = request.headers.get("Cookie", "")
        response = web.Response(text=f"<html><body><p id='cookie'>{cookie}</p></body></html>",
                                content_type="text/html")
        response.set_cookie("seen", str(self.visits), path="/")
        return response

    async def job(self, request: web.Request) -> web.Response:
        return web.Response(text=f"<html><body><h1>{request.match_info['id']}</h1></body></html>",
                            content_type="text/html")
