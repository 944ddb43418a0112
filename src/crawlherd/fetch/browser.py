"""``BrowserFetcher``: Playwright driving the system Chromium, for targets with ``requires_playwright``.

The browser never touches the network by itself: every request the page makes goes through a route
handler that runs the address guard on its URL and fetches it through Playwright's request context
with redirects turned off, so each redirect hop is checked too. The main document must pass the
content-type allow-list and the body-size limit before the browser sees it. Redirects -- of the main
document and of the page's own requests -- are followed by :func:`crawlherd.fetch.hops.follow`, the
loop every fetcher shares: for the main document this fetcher makes one navigation per hop, each
after the address guard and the send gate. The whole fetch runs under ``total_timeout`` (or the
request's ``meta["crawlherd.timeouts"]["total"]``); the rendered HTML is held to ``max_body_size`` as well.

Which Chromium, and the options: :mod:`crawlherd.fetch.chromium`. Without Playwright
(``pip install 'crawlherd[browser]'``) or without a browser,
:class:`~crawlherd.errors.BrowserUnavailableError` says which is missing. What is done on the page
before its HTML is taken (wait for a condition, scroll or "load more" pagination):
:mod:`crawlherd.fetch.actions`. Sessions (cookies, headers, proxy) each get a browser context of their
own: :mod:`crawlherd.fetch.contexts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable
from typing import Any

from crawlherd._redact import redact_url
from crawlherd.content_type import charset_of, media_type
from crawlherd.errors import (
    AddressNotAllowedError,
    BrowserUnavailableError,
    ConfigurationError,
    FetchError,
    FetchTimeoutError,
)
from crawlherd.fetch.actions import PageActions, run_actions
from crawlherd.fetch.base import FetchLimits, Response, Timeouts, result_of_fetch
from crawlherd.fetch.chromium import CHROMIUM_ARGS, LOCAL_NETWORK_ARGS, BrowserOptions, find_chromium, open_browser
from crawlherd.fetch.contexts import BrowserSession, ContextPool, SessionContext, proxy_settings
from crawlherd.fetch.gate import SendGate, check_veto, pass_gate
from crawlherd.fetch.guard import check_address, parse_networks
from crawlherd.fetch.hops import AcceptedTypes, Hop, check_size, follow, response_of
from crawlherd.fetch.routes import AddressCheck, PageRoutes, PageState, first_line, host_port
from crawlherd.fetch.socks_relay import SocksRelay, needs_relay
from crawlherd.request import Request
from crawlherd.result import CrawlResult

__all__ = ["CHROMIUM_ARGS", "LOCAL_NETWORK_ARGS", "AddressCheck", "BrowserFetcher", "BrowserOptions", "find_chromium"]

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def _wants_screenshot(request: Request, default: bool) -> bool:
    return bool(request.meta.get("crawlherd.screenshot", request.meta.get("screenshot", default)))


class BrowserFetcher(PageRoutes):
    """A :class:`~crawlherd.fetch.base.Fetcher` that renders pages in headless Chromium.

    ``BrowserFetcher(limits=None, *, executable_path=None, max_pages=4, wait_until="networkidle",
    wait_for=None, screenshot=False, block_resource_types=(), extra_args=(), address_check=None,
    launch_timeout=30.0)``.

    - ``max_pages``: pages open at once (a semaphore); further fetches wait for a free one.
    - ``wait_until``: when navigation counts as done (``networkidle`` waits for 500 ms without traffic).
    - ``wait_for``: a selector that must be attached before the HTML is taken (a request's page
      actions, ``meta["crawlherd.page"]``, or ``meta["wait_for"]`` override it); it never appearing is
      a FetchTimeoutError. Page actions (:mod:`crawlherd.fetch.actions`) also scroll or click "load more".
    - ``screenshot``: a full-page PNG in ``Response.screenshot`` (``meta["crawlherd.screenshot"]``, as
      ``CrawlerRunConfig(screenshot=True)`` sets it, or ``meta["screenshot"]`` overrides). A fetch that
      asked for one and failed once its page was rendered carries one in ``FetchError.screenshot``.
    - A request under a session (``meta["crawlherd.session"]``) gets a browser context of the
      session's own (:mod:`crawlherd.fetch.contexts`); ``Response.cookies`` reports what the site set.
    - ``block_resource_types``: Playwright resource types to refuse (e.g. ``("image", "media", "font")``).
    - ``address_check``: replaces the default guard (:func:`crawlherd.fetch.guard.check_address` with
      ``limits.allow_private_addresses`` and ``limits.allowed_networks``) for every request the page makes.

    The browser is launched by ``__aenter__`` (or the first fetch) and closed by :meth:`close`.
    Pages are pooled (blanked and reused after a clean fetch, closed after a failed one). Only GET
    is supported. The response body is the rendered DOM (UTF-8) for HTML documents, the
    raw body for other allowed types (JSON, text).
    """

    #: It renders pages, so ``CrawlerRunConfig(screenshot=True)`` gets a PNG (see the Fetcher protocol).
    takes_screenshots = True

    def __init__(
        self,
        limits: FetchLimits | None = None,
        options: BrowserOptions | None = None,
        *,
        address_check: AddressCheck | None = None,
    ) -> None:
        self.limits = limits or FetchLimits()
        self.options = options = options or BrowserOptions()
        self._networks = parse_networks(self.limits.allowed_networks)
        self._address_check: AddressCheck = address_check or self._default_check
        self._types = AcceptedTypes()
        self._semaphore = asyncio.Semaphore(options.max_pages)
        self._start_lock = asyncio.Lock()
        self._playwright: Any = None
        self._browser: Any = None
        self._contexts: ContextPool | None = None
        #: SOCKS5 proxies with credentials, by URL: the local relays Chromium goes through instead.
        self._relays: dict[str, SocksRelay] = {}
        self._errors: Any = None  # the playwright.async_api module, for its exception classes
        self.pages_open = 0
        self._page_states: dict[Any, PageState] = {}
        #: The per-host send gate (see :class:`~crawlherd.fetch.base.Fetcher`): awaited right before
        #: each navigation -- every redirect hop too -- once the page is ready.
        self.send_gate: SendGate | None = None

    def _viewport(self) -> dict[str, Any]:
        """The context's ``viewport`` option when BrowserOptions sets one."""
        width, height = self.options.viewport_width, self.options.viewport_height
        if width is None and height is None:
            return {}
        return {"viewport": {"width": width or 1280, "height": height or 720}}

    async def _default_check(self, host: str, port: int, url: str) -> None:
        await check_address(
            host, port, url=url, allow_private=self.limits.allow_private_addresses, allowed_networks=self._networks
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> BrowserFetcher:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def started(self) -> bool:
        return self._browser is not None

    @property
    def _context(self) -> Any:
        """The browser context of requests without a session."""
        pool = self._contexts
        return pool.default.context if pool is not None and pool.default is not None else None

    async def start(self) -> None:
        """Launch Chromium, or connect to a running one (once). Raises BrowserUnavailableError when
        Playwright or the browser is missing."""
        async with self._start_lock:
            if self._browser is not None and self._browser.is_connected():
                return
            await self._shutdown()
            playwright, browser, pw_api = await open_browser(
                self.options, allow_private=self.limits.allow_private_addresses
            )
            self._errors = pw_api
            self._playwright, self._browser = playwright, browser
            self._contexts = ContextPool(self._new_context, base_headers=self.options.headers,
                                         base_cookies=self.options.cookies)
            try:
                await self._contexts.start()
            except pw_api.Error as exc:
                await self._shutdown()
                raise BrowserUnavailableError(f"could not open a browser context: {first_line(exc)}") from None

    async def _new_context(self, session: BrowserSession | None) -> Any:
        """A browser context: the default one, or a session's, with its proxy (the session's, else the
        browser's; its address checked by the guard, as a target's), user agent, headers and cookies."""
        browser = self.options
        options: dict[str, Any] = {"user_agent": self.limits.user_agent, "service_workers": "block",
                                   "accept_downloads": False, **self._viewport()}
        proxy = browser.proxy
        if session is not None:
            proxy = session.proxy or proxy
            options["user_agent"] = session.user_agent or self.limits.user_agent
        if proxy is not None:
            options["proxy"] = await self._proxy_option(proxy)
        if browser.headers:
            options["extra_http_headers"] = dict(browser.headers)
        context = await self._browser.new_context(**options)
        if browser.cookies:
            await context.add_cookies([dict(c) for c in browser.cookies])
        return context

    async def _proxy_option(self, proxy: str) -> dict[str, str]:
        """Playwright's ``proxy`` option for ``proxy``, once the guard has passed its address; a
        SOCKS5 proxy with credentials through a relay of this fetcher's (:mod:`crawlherd.fetch.socks_relay`)."""
        settings = proxy_settings(proxy)
        host, port = host_port(settings["server"])
        await self._address_check(host, port, redact_url(proxy))
        if not needs_relay(proxy):
            return settings
        relay = self._relays.get(proxy)
        if relay is None:
            relay = self._relays[proxy] = await SocksRelay(proxy, self._address_check).start()
        return {"server": relay.url}

    async def _shutdown(self) -> None:
        contexts, browser, playwright = self._contexts, self._browser, self._playwright
        self._contexts = self._browser = self._playwright = None
        relays, self._relays = list(self._relays.values()), {}
        if contexts is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await contexts.close()
        if browser is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await browser.close()
        if playwright is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await playwright.stop()
        for relay in relays:
            await relay.close()

    async def close(self) -> None:
        """Close the browser and stop Playwright. Idempotent."""
        async with self._start_lock:
            await self._shutdown()

    # -- fetching --------------------------------------------------------------------------------

    def fetch_result(self, request: Request) -> Awaitable[CrawlResult]:
        """:meth:`fetch`, answered as a :class:`~crawlherd.result.CrawlResult`."""
        return result_of_fetch(self, request)

    async def fetch(self, request: Request) -> Response:
        """Render ``request.url`` in a page of its own and return the resulting HTML."""
        url = request.url
        if request.method != "GET":
            raise FetchError(f"{url}: BrowserFetcher fetches GET only, not {request.method}", url=url, request=request)
        host, port = host_port(request.canonical_url)
        try:
            await self._address_check(host, port, url)  # before a browser is even needed
        except AddressNotAllowedError as exc:
            exc.request = request
            raise
        try:
            session, actions = BrowserSession.of(request), PageActions.of(request)
        except ConfigurationError as exc:
            raise FetchError(f"{url}: {exc}", url=url, request=request) from None
        if self._browser is None or not self._browser.is_connected():
            await self.start()
        assert self._contexts is not None
        total = Timeouts.of(request, self.limits).total
        async with self._semaphore:
            state = PageState(deadline=time.monotonic() + total, actions=actions,
                              headers=dict(request._headers or {}))  # noqa: SLF001 - not the dict-making property
            entry = await self._contexts.get(session)
            try:
                return await self._render(request, state, entry, session, total)
            finally:
                self._contexts.release(entry)

    def _guard(self, url: str) -> Awaitable[None]:
        """The address check of ``url``'s host (a hop of the main document)."""
        host, port = host_port(url)
        return self._address_check(host, port, url)

    async def _acquire_page(self, entry: SessionContext, request: Request) -> Any:
        """An idle page of the context's pool, or a new one with the guard's routes installed."""
        while entry.idle_pages:
            page = entry.idle_pages.pop()
            if not page.is_closed():
                return page
        try:
            page = await entry.context.new_page()
        except self._errors.Error as exc:
            raise self._unavailable(exc, request) from None

        async def handle(route: Any, routed: Any) -> None:
            state = self._page_states.get(page)
            if state is None:  # between two fetches: nothing may load
                with contextlib.suppress(Exception):
                    await route.abort("blockedbyclient")
                return
            await self._route(state, page, route, routed)

        async def handle_websocket(socket: Any) -> None:
            state = self._page_states.get(page)
            if state is None:
                with contextlib.suppress(Exception):
                    await socket.close(code=1008, reason="no fetch in progress")
                return
            await self._route_websocket(state, socket)

        await page.route("**/*", handle)
        await page.route_web_socket("**/*", handle_websocket)
        return page

    async def _release_page(self, entry: SessionContext, page: Any, *, reuse: bool) -> None:
        """Back to the pool after a clean fetch (blanked first), else closed."""
        self._page_states.pop(page, None)
        if reuse and not page.is_closed() and self._browser is not None:
            try:
                await page.goto("about:blank", timeout=5000)
            except Exception:  # a page that cannot be blanked is closed below
                pass
            else:
                entry.idle_pages.append(page)
                return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await page.close()

    async def _render(
        self, request: Request, state: PageState, entry: SessionContext, session: BrowserSession | None, total: float
    ) -> Response:
        """The fetch in a page of ``entry``'s context, within ``total`` seconds; a failure once the page
        was rendered gets its screenshot when the request asked for one (taken after the deadline)."""
        page = await self._acquire_page(entry, request)
        self._page_states[page] = state
        self.pages_open += 1
        reuse = False
        try:
            page.set_default_timeout(state.timeout_ms())
            try:
                async with asyncio.timeout(total):
                    if session is not None:
                        await entry.apply(session, request.url)
                    navigate = functools.partial(self._navigate, page, state, request)
                    hop = await follow(navigate, request, self.limits, guard=self._guard, guard_first=False)
                    response = response_of(request, hop)
                    response.cookies = await entry.new_cookies() if session is not None else []
            except TimeoutError:
                raise FetchTimeoutError(
                    f"{request.url}: the page was not ready within total_timeout={total:g}s (while {state.stage})",
                    url=request.url, request=request,
                ) from None
            reuse = True
            return response
        except FetchError as exc:
            if state.navigated and _wants_screenshot(request, self.options.screenshot):
                with contextlib.suppress(Exception):
                    exc.screenshot = await page.screenshot(full_page=True, type="png", timeout=10_000)
            raise
        finally:
            self.pages_open -= 1
            await asyncio.shield(self._release_page(entry, page, reuse=reuse))

    async def _navigate(
        self, page: Any, state: PageState, request: Request, url: str, method: str, body: bytes | None, host: str
    ) -> Hop:
        """One hop of the main document: a navigation to ``url``, whose answer the route handler holds
        to the limits (:meth:`_route_main`); a redirect comes back as one, a page rendered whole."""
        pw = self._errors
        state.redirect = None
        if self.send_gate is not None:
            state.stage = "waiting for the send gate"
            await pass_gate(self.send_gate, host)
        check_veto(url)
        state.stage = f"loading {url}"
        try:
            response = await page.goto(url, wait_until=self.options.wait_until, timeout=state.timeout_ms())
        except pw.TimeoutError:
            if state.error is not None:
                raise state.error from None
            raise FetchTimeoutError(
                f"{url}: navigation did not reach {self.options.wait_until!r} in time", url=url, request=request
            ) from None
        except pw.Error as exc:
            if state.error is not None:
                raise state.error from None
            if state.redirect is None:
                raise self._translate(exc, url, request) from None
            response = None
        if state.error is not None:
            raise state.error
        if state.redirect is not None:
            return Hop(*state.redirect)
        if response is None:
            raise FetchError(f"{url}: the browser got no response", url=url, request=request)
        state.navigated = True
        actions = state.actions
        if actions.wait_for is None and self.options.wait_for:
            actions = PageActions(wait_for=self.options.wait_for, pagination=actions.pagination)
        if actions:
            state.stage = f"waiting for {actions.wait_for!r}" if actions.pagination is None else "paginating"
            await run_actions(page, actions, deadline=state.deadline, url=url, request=request,
                              timeout_error=self._errors.TimeoutError)
        return await self._rendered(page, request, state)

    async def _rendered(self, page: Any, request: Request, state: PageState) -> Hop:
        headers = dict(state.main_headers)
        content_type = headers.get("content-type", "")
        mime = media_type(content_type)
        state.stage = "reading the rendered page"
        if mime in _HTML_TYPES or not mime:
            body = (await page.content()).encode("utf-8")
            headers["content-type"] = f"{mime or 'text/html'}; charset=utf-8"
            for stale in ("content-length", "content-encoding"):  # they described the original bytes
                headers.pop(stale, None)
            encoding = "utf-8"
        else:
            body = state.main_body
            encoding = charset_of(content_type)
        check_size(self.limits, len(body), page.url, request, what="rendered page")
        shot = None
        state.stage = "taking the screenshot"
        if _wants_screenshot(request, self.options.screenshot):
            shot = await page.screenshot(full_page=True, type="png", timeout=state.timeout_ms())
        return Hop(state.main_status, None, page.url, headers, body, encoding, shot)

    # -- errors ----------------------------------------------------------------------------------

    def _translate(self, exc: BaseException, url: str, request: Request | None) -> FetchError:
        message = first_line(exc)
        if isinstance(exc, self._errors.TimeoutError) or "Timeout" in message:
            return FetchTimeoutError(f"{url}: {message}", url=url, request=request)
        if self._browser is not None and not self._browser.is_connected():
            return self._unavailable(exc, request)
        return FetchError(f"{url}: {message}", url=url, request=request)

    def _unavailable(self, exc: BaseException, request: Request | None) -> BrowserUnavailableError:
        url = request.url if request is not None else None
        return BrowserUnavailableError(f"Chromium went away: {first_line(exc)}", url=url, request=request)
