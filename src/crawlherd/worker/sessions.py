"""A website's pages fetched under sessions: which session (and so which proxy) fetches a page, what
its answer says (a success, a block page, a lapsed login, a transport error), and what that changes in
the sessions store (:mod:`crawlherd.sessions`) every worker sharing the frontier reads.

For each page of a website whose fetch profile asks for it (``SiteSpec.fetch``, see
:mod:`crawlherd.fetchprofile`):

1. the proxies of the website's current tier that are not resting, the least used first (none rests
   in that tier: the tiers above, then below; every proxy rests: the page waits in the frontier until
   the first is back -- :class:`~crawlherd.errors.RetryLater`);
2. a live session of that proxy (not retired, younger than ``max_age``, under ``max_uses`` and
   ``max_errors``; logged in when the profile has a login step), or a new one;
3. the page fetched with the session's proxy, headers and cookies (``meta["crawlherd.session"]``);
   the cookies the site set are kept in the session;
4. a block page retires the session, rests the proxy for the website (``cool_off``), counts towards
   the website's tier, and the page goes back to the frontier to be fetched through another session
   -- until it has met ``page_attempts`` blocks: then it fails with :class:`~crawlherd.errors.BlockedError`
   and its job ends "blocked". A block page is never a success. The proxy rests in this worker from
   the moment the block page is read: a request of the worker already on its way through that proxy but
   still waiting at the send gate is not sent (:data:`~crawlherd.fetch.gate.SEND_VETO`) and its page
   goes back to the frontier too.
5. a lapsed login (a redirect to the login URL, a 401, the lapse marker) is logged in again once per
   lapse -- the first worker to claim the lapse does it, the others' pages wait for it -- and the page
   is fetched again.

Politeness is not here: the page was leased from the frontier under its host's delay and in-flight
cap, whichever proxy fetches it; a re-fetch goes back through the frontier.

Credentials are read when a login is made (:meth:`LoginSpec.payload`) and go into the login request's
body only; nothing here logs or stores them.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from crawlherd import metrics
from crawlherd.errors import ConfigurationError, RetryLater, SendVetoedError
from crawlherd.fetch.gate import SEND_VETO
from crawlherd.fetch.session import SESSION_META, SessionMeta, merge_cookies
from crawlherd.fetchprofile import DIRECT, FetchProfile, proxy_label, with_secrets
from crawlherd.request import Request
from crawlherd.result import CrawlResult
from crawlherd.sessions import Session, SessionChange, SessionStore, SiteHealth, TierRule
from crawlherd.sitespec import SiteSpec

__all__ = ["SessionPool", "Verdict", "verdict_of"]

log = logging.getLogger(__name__)

FetchFn = Callable[[Request], Awaitable[CrawlResult]]
_PAGE_MEMORY = 6 * 3600.0  # seconds a page's block count is kept
_LOGIN_CLAIM = 60.0  # seconds a login claim holds (a worker that died while logging in frees it)
_WAIT_LOGIN = 0.5  # seconds a page waits for another worker's login
_NEW_CLAIM = 10.0  # seconds a claim to make a proxy's next session holds


def verdict_of(profile: FetchProfile, result: CrawlResult) -> tuple[str, str | None]:
    """What an answer under a session says: ``("ok", None)``, ``("blocked", why)``, ``("lapsed",
    why)`` or ``("error", why)`` (no answer at all)."""
    if result.status_code is None:
        return "error", result.error_message
    final = result.final_url or result.url
    login = profile.login
    text: str | None = None
    if login is not None:
        text = result.text
        if login.lapsed(result.status_code, final, result.redirects, text):
            return "lapsed", f"the login lapsed (HTTP {result.status_code} at {final})"
    ban = profile.ban
    if ban.markers and result.status_code < 400 and text is None:
        text = result.text
    why = ban.blocked(result.status_code, result.headers, final, text)
    return ("blocked", why) if why else ("ok", None)


Verdict = tuple[str, str | None]


class SessionPool:
    """Sessions of the worker's websites over ``store``; ``fetch`` a page of a website through one.
    ``send`` makes a login request (the worker's fetcher); ``clock`` is wall-clock seconds (shared by
    the fleet: a proxy rests until a wall-clock time)."""

    def __init__(self, store: SessionStore, *, send: FetchFn, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._send = send
        self._clock = clock
        #: The websites this worker fetched under sessions (reported in its heartbeat).
        self.sites: set[str] = set()
        # (website, proxy label) -> until when the proxy rests, as this worker saw it: set the moment a
        # block page is read, before the store has it (another page's choice, a request at the gate)
        self._rests: dict[tuple[str, str], float] = {}

    async def summary(self, *, most: int = 20) -> dict[str, Any]:
        """What the operator sees of each website's sessions (the console's website page, from the
        worker's heartbeat): its tier, each proxy's requests, blocks, successes and rest-until (wall
        clock), the live and retired sessions. Proxies are labels: no credential."""
        out: dict[str, Any] = {}
        for name in sorted(self.sites)[:most]:
            health = await self.store.health(name)
            sessions = await self.store.sessions(name)
            out[name] = {
                "tier": health.tier,
                "proxies": {
                    label: {"requests": p.requests, "blocks": p.blocks, "successes": p.successes,
                            "rest_until": p.rest_until}
                    for label, p in sorted(health.proxies.items())
                },
                "sessions": [
                    {"id": s.id[:8], "proxy": s.proxy, "uses": s.uses, "errors": s.errors,
                     "age": self._clock() - s.created, "logged_in": s.login_epoch > 0, "retired": s.retired}
                    for s in sorted(sessions, key=lambda s: (s.retired is not None, -s.created))[:most]
                ],
            }
        return out

    async def fetch(self, site: SiteSpec, request: Request, fetch: FetchFn) -> CrawlResult:
        """``fetch(request)`` under one of ``site``'s sessions; see the module's docstring. Raises
        RetryLater when the page must wait or be fetched again through another session."""
        profile = site.fetch
        self.sites.add(site.name)
        urls = {proxy_label(p): p for tier in profile.tiers for p in tier}
        session = await self._session(site, urls)
        if profile.login is not None and session.login_epoch == 0:
            try:
                failed = await self._login(site, session, urls, request)
            except _LoginBlocked as blocked:
                metrics.proxy_fetch(site.name, session.proxy, "blocked")
                return await self._blocked(site, request, session, blocked.why)
            if failed is not None:
                return failed
        used = await self.store.use(site.name, session.id)
        if used is None:
            raise RetryLater("its session was retired meanwhile")
        under = request.with_meta({**request.meta, SESSION_META: _meta(used, urls)})
        result = await self._vetoed(site, used, fetch, under)
        result.request = request
        outcome, why = verdict_of(profile, result)
        metrics.proxy_fetch(site.name, used.proxy, outcome)
        return await self._settle(site, request, used, result, outcome, why, urls)

    async def _settle(
        self, site: SiteSpec, request: Request, used: Session, result: CrawlResult, outcome: str, why: str | None,
        urls: dict[str, str | None],
    ) -> CrawlResult:
        profile, store, name = site.fetch, self.store, site.name
        rule = _rule(profile)
        if outcome == "ok":
            if result.cookies:
                await store.update(name, used.id, SessionChange(cookies=merge_cookies(used.cookies, result.cookies)))  # type: ignore[arg-type]
            await store.record(name, used.proxy, "ok", now=self._clock(), rule=rule)
            return result
        if outcome == "lapsed":
            try:
                await self._relogin(site, used, urls, request)
            except _LoginBlocked as blocked:
                return await self._blocked(site, request, used, blocked.why)
            raise RetryLater(why or "the login lapsed")
        if outcome == "error":
            s = await store.update(name, used.id, SessionChange(error=True))
            if s is not None and s.errors >= profile.session.max_errors:
                await store.update(name, used.id, SessionChange(retire=f"{s.errors} errors"))
            await store.record(name, used.proxy, "error", now=self._clock(), rule=rule)
            return result  # a transport error: the page fails as any fetch that got no answer
        return await self._blocked(site, request, used, why)

    async def _blocked(self, site: SiteSpec, request: Request, used: Session, why: str | None) -> CrawlResult:
        """A block page met through ``used``: the session retired, its proxy rested for the website; the
        page fetched again through another session (RetryLater), or -- past its attempts -- failed."""
        profile, store, name = site.fetch, self.store, site.name
        self._rests[name, used.proxy] = self._clock() + _rule(profile).cool_off  # before any await
        await store.update(name, used.id, SessionChange(retire=f"blocked: {why}"))
        health = await store.record(name, used.proxy, "blocked", now=self._clock(), rule=_rule(profile))
        blocks = await store.count(f"blocked:{name}:{request.fingerprint.hex()}", _PAGE_MEMORY)
        log.info("%s: blocked through %s (%s); the page met %d block(s), the site is on tier %d",
                 request.url, used.proxy, why, blocks, health.tier)
        if blocks >= profile.page_attempts:
            return CrawlResult(
                url=request.url, success=False, error_type="BlockedError", request=request, depth=request.depth,
                error_message=(
                    f"blocked: {why} -- {blocks} block pages through every proxy tier "
                    f"({profile.identities} {'identity' if profile.identities == 1 else 'identities'})"
                ),
            )
        raise RetryLater(f"blocked through {used.proxy}: {why}")

    async def _vetoed(self, site: SiteSpec, session: Session, fetch: FetchFn, request: Request) -> CrawlResult:
        """``fetch(request)`` through ``session``, not sent if its proxy comes to rest in this worker while
        the request waits at the send gate (a block page another request read meanwhile): then the page
        goes back to the frontier (RetryLater), as it does after a block."""
        token = SEND_VETO.set(lambda: self._resting(site.name, session.proxy))
        try:
            result = await fetch(request)  # a crawler answers a vetoed request as a failed result
        except SendVetoedError as exc:  # a fetcher (the login's) raises it
            raise RetryLater(str(exc)) from None
        finally:
            SEND_VETO.reset(token)
        if result.status_code is None and (why := self._resting(site.name, session.proxy)) is not None:
            raise RetryLater(f"not sent: {why}")  # through another session, as after a block
        return result

    def _resting(self, site: str, label: str) -> str | None:
        """Why ``label`` must not be used for ``site`` now, as this worker saw it (None: it may)."""
        until = self._rests.get((site, label))
        if until is None or until <= self._clock():
            return None
        return f"{label} rests for {site} after a block page"

    # -- choosing ----------------------------------------------------------------------------------

    async def _session(self, site: SiteSpec, urls: dict[str, str | None]) -> Session:
        profile, store = site.fetch, self.store
        now = self._clock()
        health = await store.health(site.name)
        labels, wait = _available(profile, health, now)
        labels = [label for label in labels if self._resting(site.name, label) is None]
        if not labels:
            raise RetryLater(f"every proxy of {site.name} rests", delay=wait)
        live: dict[str, list[Session]] = {}
        limits = profile.session
        made: dict[str, int] = {}
        for s in await store.sessions(site.name):
            made[s.proxy] = made.get(s.proxy, 0) + 1
            if s.retired is not None or s.proxy not in urls:
                continue
            if s.created + limits.max_age <= now or s.uses >= limits.max_uses:
                why = "max age" if s.uses < limits.max_uses else "max uses"
                await store.update(site.name, s.id, SessionChange(retire=why))
                continue
            live.setdefault(s.proxy, []).append(s)
        label = labels[0]
        mine = live.get(label, [])
        ready = [s for s in mine if profile.login is None or s.login_epoch > 0]
        if not mine or (len(mine) < limits.per_proxy and len(ready) == len(mine)):
            # one new session per proxy at a time, fleet-wide: the others wait for it and share it
            if await self.store.claim(f"new:{site.name}:{label}:{made.get(label, 0)}", _NEW_CLAIM):
                return await self._new(site, label, health)
            if not ready:
                raise RetryLater(f"a session of {site.name} through {label} is being made", delay=_WAIT_LOGIN)
        if ready:
            return min(ready, key=lambda s: s.uses)
        return mine[0]  # not logged in yet: logged in by whoever claims it (or being logged in elsewhere)

    async def _new(self, site: SiteSpec, label: str, health: SiteHealth) -> Session:
        profile = site.fetch
        host = (urlsplit(site.base_url).hostname or "").lower()
        cookies = [{"name": k, "value": v, "domain": host, "path": "/"} for k, v in profile.cookies.items()]
        tier = next((i for i, t in enumerate(profile.tiers) if label in {proxy_label(p) for p in t}), 0)
        s = Session(uuid.uuid4().hex, label, tier, profile.request_headers(), cookies, self._clock())
        await self.store.add(site.name, s)
        log.debug("%s: new session %s through %s (tier %d)", site.name, s.id[:8], label, tier)
        return s

    # -- logging in -----------------------------------------------------------------------------------

    async def _relogin(self, site: SiteSpec, used: Session, urls: dict[str, str | None], request: Request) -> None:
        stored = [s for s in await self.store.sessions(site.name) if s.id == used.id]
        current = stored[0] if stored else used
        if current.login_epoch > used.login_epoch:
            return  # another worker logged this session in again meanwhile
        failed = await self._login(site, current, urls, request)
        if failed is not None:
            raise RetryLater(failed.error_message or "login failed", delay=_rule(site.fetch).cool_off)

    async def _login(
        self, site: SiteSpec, session: Session, urls: dict[str, str | None], request: Request
    ) -> CrawlResult | None:
        """Log ``session`` in (once per lapse, fleet-wide); None when it worked, else a failed result.
        Raises RetryLater when another worker is logging it in."""
        login = site.fetch.login
        assert login is not None
        key = f"login:{site.name}:{session.id}:{session.login_epoch}"
        if not await self.store.claim(key, _LOGIN_CLAIM):
            raise RetryLater("another worker is logging this session in", delay=_WAIT_LOGIN)
        try:
            payload = login.payload()
        except ConfigurationError as exc:
            metrics.LOGINS.labels(site=site.name, outcome="failed").inc()
            return _failed(request, f"login to {site.name} cannot be made: {exc}")
        if login.encoding == "json":
            body, ctype = json.dumps(payload).encode(), "application/json"
        else:
            body, ctype = urlencode(payload).encode(), "application/x-www-form-urlencoded"
        del payload
        meta = _meta(session, urls)
        answer = await self._vetoed(
            site, session, self._send,
            Request(login.url, method="POST", body=body, headers={"Content-Type": ctype}, meta={SESSION_META: meta}),
        )
        cookies = merge_cookies(session.cookies, answer.cookies)  # type: ignore[arg-type]
        final = answer.final_url or answer.url
        blocked = site.fetch.ban.blocked(answer.status_code, answer.headers, final, answer.text)
        if blocked is not None:
            raise _LoginBlocked(blocked)
        if answer.status_code is None or not login.succeeded(
            answer.status_code, answer.final_url or answer.url, answer.text
        ):
            metrics.LOGINS.labels(site=site.name, outcome="failed").inc()
            await self.store.update(site.name, session.id, SessionChange(retire="login failed"))
            why = answer.error_message or f"HTTP {answer.status_code} at {answer.final_url or answer.url}"
            log.warning("%s: login through %s failed (%s)", site.name, session.proxy, why)
            return _failed(request, f"login to {site.name} failed ({why}): check its login settings and secrets")
        logged_in = SessionChange(cookies=cookies, login_epoch=session.login_epoch + 1)  # type: ignore[arg-type]
        await self.store.update(site.name, session.id, logged_in)
        metrics.LOGINS.labels(site=site.name, outcome="ok").inc()
        log.info("%s: logged in through %s (session %s, login %d)", site.name, session.proxy, session.id[:8],
                 session.login_epoch + 1)
        return None


class _LoginBlocked(Exception):
    """A login answered with a block page: a block of its session, not a failed login."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _available(profile: FetchProfile, health: SiteHealth, now: float) -> tuple[list[str], float]:
    """The proxy labels to try (the current tier's not resting, least used first, else another tier's),
    or none and the seconds until the first proxy is back."""
    tiers = [[proxy_label(p) for p in tier] for tier in profile.tiers]
    current = min(health.tier, len(tiers) - 1)
    order = [current, *range(current + 1, len(tiers)), *range(current - 1, -1, -1)]
    for i in order:
        free = [label for label in tiers[i] if not health.proxy(label).resting(now)]
        if free:
            random.shuffle(free)
            free.sort(key=lambda label: health.proxy(label).requests)
            return free, 0.0
    back = min(health.proxy(label).rest_until for tier in tiers for label in tier)
    return [], max(0.05, back - now)


def _rule(profile: FetchProfile) -> TierRule:
    ban = profile.ban
    return TierRule(len(profile.tiers), ban.cool_off, ban.escalate_after, ban.descend_after)


def _meta(session: Session, urls: dict[str, str | None]) -> SessionMeta:
    """What the request carries to the fetcher: the secrets the profile names read now (they are in no
    store: the request with this meta is never queued)."""
    proxy = None if session.proxy == DIRECT else urls.get(session.proxy)
    return SessionMeta(
        id=session.id,
        proxy=with_secrets(proxy) if proxy else None,
        headers={k: with_secrets(v) for k, v in session.headers.items()},
        cookies=[{**c, "value": with_secrets(c["value"])} for c in session.cookies],  # type: ignore[typeddict-item]
    )


def _failed(request: Request, message: str) -> CrawlResult:
    return CrawlResult(url=request.url, success=False, error_message=message, error_type="LoginError",
                       request=request, depth=request.depth)
