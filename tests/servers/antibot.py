"""An anti-bot job board of the tests' own (loopback), and its server-side log.

- a request whose User-Agent is a library's default (no ``Mozilla/``) gets 403;
- ``/search?q=&page=N`` is served only to a logged-in cookie (``sid``); otherwise a redirect to
  ``/login``; a session (``sid``) expires ``session_ttl`` seconds after its login, or once it was
  served ``session_pages`` search pages;
- ``POST /login`` (form ``user``, ``password``) answers a new ``sid`` and a redirect to ``/account``;
- an identity (the client address: each test proxy connects from its own 127.0.0.N) that makes more
  than ``limit`` requests (logins aside) is blocked for ``block_for`` seconds -- ``/search`` answers 403,
  ``/job/<id>`` a 200 captcha page -- and its count starts again after the block;
- ``/job/<id>``: a posting's detail page (its salary), public.

:attr:`AntiBotBoard.log` records every request (time, identity, path, what was answered) for the tests'
assertions; :meth:`truth` is what a crawl of a keyword must collect.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["AntiBotBoard", "Hit"]

PER_PAGE = 5


@dataclass(frozen=True)
class Hit:
    at: float
    identity: str
    path: str
    answer: str  # "ok", "blocked", "captcha", "login", "login-failed", "to-login", "expired", "bad-ua"
    sid: str | None = None


@dataclass
class AntiBotBoard:
    user: str
    password: str
    pages: int = 3
    limit: int = 6
    block_for: float = 1.0
    session_ttl: float = 60.0
    session_pages: int = 1000  # search pages a session serves before it expires
    log: list[Hit] = field(default_factory=list)
    _sids: dict[str, float] = field(default_factory=dict)
    _served: dict[str, int] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)
    _blocked_until: dict[str, float] = field(default_factory=dict)
    blocks: list[tuple[str, float, float]] = field(default_factory=list)  # identity, from, until

    def truth(self, keyword: str) -> dict[str, dict[str, Any]]:
        """The postings a crawl of ``keyword`` must collect: url path -> fields."""
        out = {}
        for page in range(1, self.pages + 1):
            for i in range(PER_PAGE):
                n = (page - 1) * PER_PAGE + i
                out[f"/job/{keyword}-{n}"] = {"title": f"{keyword} engineer {n}", "salary": f"{50 + n}k"}
        return out

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/search", self._search)
        app.router.add_get("/job/{id}", self._job)
        app.router.add_post("/login", self._login)
        app.router.add_get("/login", self._login_form)
        app.router.add_get("/account", self._account)
        app.router.add_get("/robots.txt", self._robots)
        return app

    def _hit(self, request: web.Request, answer: str, sid: str | None = None) -> None:
        self.log.append(Hit(time.monotonic(), request.remote or "", request.path_qs, answer, sid))

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/robots.txt":
            return await handler(request)
        if "Mozilla/" not in request.headers.get("User-Agent", ""):
            self._hit(request, "bad-ua")
            return web.Response(status=403, text="no bots")
        if request.path != "/login":
            who = request.remote or ""
            now = time.monotonic()
            until = self._blocked_until.get(who, 0.0)
            if until > now:
                return self._block(request)
            if until:  # the block is over: counting starts again
                del self._blocked_until[who]
                self._counts[who] = 0
            self._counts[who] = self._counts.get(who, 0) + 1
            if self._counts[who] > self.limit:
                self._blocked_until[who] = now + self.block_for
                self.blocks.append((who, now, now + self.block_for))
                return self._block(request)
        return await handler(request)

    def _block(self, request: web.Request) -> web.Response:
        if request.path.startswith("/job/"):
            self._hit(request, "captcha")
            captcha = "<html><body><h1>Are you human?</h1><div class=captcha>solve me</div></body></html>"
            return web.Response(text=captcha, content_type="text/html")
        self._hit(request, "blocked")
        return web.Response(status=403, text="blocked")

    async def _robots(self, request: web.Request) -> web.Response:
        return web.Response(text="User-agent: *\nAllow: /\n")

    async def _login_form(self, request: web.Request) -> web.Response:
        self._hit(request, "login-form")
        return web.Response(text="<form method=post action=/login></form>", content_type="text/html")

    async def _login(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("user") != self.user or form.get("password") != self.password:
            self._hit(request, "login-failed")
            return web.Response(status=401, text="wrong credentials")
        sid = uuid.uuid4().hex
        self._sids[sid] = time.monotonic() + self.session_ttl
        self._hit(request, "login", sid)
        raise web.HTTPFound("/account", headers={"Set-Cookie": f"sid={sid}; Path=/; HttpOnly"})

    async def _account(self, request: web.Request) -> web.Response:
        ok = self._valid(request.cookies.get("sid"))
        self._hit(request, "ok" if ok else "to-login")
        return web.Response(text="<p>Welcome back</p>" if ok else "<p>who?</p>", content_type="text/html")

    def _valid(self, sid: str | None) -> bool:
        return sid is not None and self._sids.get(sid, 0.0) > time.monotonic()

    async def _search(self, request: web.Request) -> web.Response:
        sid = request.cookies.get("sid")
        if not self._valid(sid):
            self._hit(request, "expired" if sid in self._sids else "to-login", sid)
            raise web.HTTPFound("/login")
        self._hit(request, "ok", sid)
        assert sid is not None
        self._served[sid] = self._served.get(sid, 0) + 1
        if self._served[sid] >= self.session_pages:
            self._sids[sid] = 0.0  # this was its last page
        q = request.query.get("q", "")
        page = int(request.query.get("page", "1"))
        cards = []
        if 1 <= page <= self.pages:
            for i in range(PER_PAGE):
                n = (page - 1) * PER_PAGE + i
                cards.append(
                    f'<article class="job"><a class="link" href="/job/{q}-{n}">'
                    f'<h2 class="title">{q} engineer {n}</h2></a></article>'
                )
        return web.Response(text=f"<html><body>{''.join(cards)}</body></html>", content_type="text/html")

    async def _job(self, request: web.Request) -> web.Response:
        self._hit(request, "ok")
        n = int(request.match_info["id"].rsplit("-", 1)[1])
        return web.Response(text=f'<html><body><p class="salary">{50 + n}k</p></body></html>',
                            content_type="text/html")
