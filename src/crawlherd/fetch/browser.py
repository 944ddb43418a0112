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
:class:`~crawlherd.errors.BrowserUnavailableError` says which is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from crawlherd.content_type import charset_of, media_type
from crawlherd.errors import AddressNotAllowedError, BrowserUnavailableError, FetchError, FetchTimeoutError
from crawlherd.fetch.base import FetchLimits, Response, Timeouts, result_of_fetch
from crawlherd.fetch.chromium import CHROMIUM_ARGS, LOCAL_NETWORK_ARGS, BrowserOptions, find_chromium, launch_args
from crawlherd.fetch.gate import SendGate, pass_gate
from crawlherd.fetch.guard import check_address, parse_networks
from crawlherd.fetch.hops import AcceptedTypes, Hop, check_length, check_size, follow, redirect_location, response_of
from crawlherd.request import Request
from crawlherd.result import CrawlResult

__all__ = ["CHROMIUM_ARGS", "LOCAL_NETWORK_ARGS", "AddressCheck", "BrowserFetcher", "BrowserOptions", "find_chromium"]

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
#: ``check(host, port, url)``: raise AddressNotAllowedError to refuse a request.
AddressCheck = Callable[[str, int, str], Awaitable[None]]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    return parts.hostname or "", port


@dataclass
class _PageState:
    """What the route handler learnt while one fetch's page loaded."""

    deadline: float
    error: FetchError | None = None
    redirect: tuple[int, str] | None = None  # the main document's answer was a redirect: (status, location)
    main_status: int = 0
    main_headers: dict[str, str] = field(default_factory=dict)
    main_body: bytes = b""
    refused: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    stage: str = "starting"

    def timeout_ms(self) -> float:
        # A little under the total deadline, so Playwright's own (more specific) timeout fires first.
        return max(1.0, (self.deadline - time.monotonic()) * 1000 - 250)


class BrowserFetcher:
    """A :class:`~crawlherd.fetch.base.Fetcher` that renders pages in headless Chromium.

    ``BrowserFetcher(limits=None, *, executable_path=None, max_pages=4, wait_until="networkidle",
    wait_for=None, screenshot=False, block_resource_types=(), extra_args=(), address_check=None,
    launch_timeout=30.0)``.

    - ``max_pages``: pages open at once (a semaphore); further fetches wait for a free one.
    - ``wait_until``: when navigation counts as done (``networkidle`` waits for 500 ms without traffic).
    - ``wait_for``: a selector that must be attached before the HTML is taken (a request's
      ``meta["wait_for"]`` overrides it); it never appearing is a FetchTimeoutError.
    - ``screenshot``: a full-page PNG in ``Response.screenshot`` (``meta["crawlherd.screenshot"]``, as
      ``CrawlerRunConfig(screenshot=True)`` sets it, or ``meta["screenshot"]`` overrides).
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
        self._context: Any = None
        self._errors: Any = None  # the playwright.async_api module, for its exception classes
        self.pages_open = 0
        self._idle_pages: list[Any] = []
        self._page_states: dict[Any, _PageState] = {}
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

    async def start(self) -> None:
        """Launch Chromium (once). Raises BrowserUnavailableError when Playwright or the browser is missing."""
        async with self._start_lock:
            if self._browser is not None and self._browser.is_connected():
                return
            await self._shutdown()
            try:
                import playwright.async_api as pw_api
            except ImportError:
                raise BrowserUnavailableError(
                    "Playwright is not installed: pip install 'crawlherd[browser]' (the browser itself comes "
                    "from the system: apt-get install chromium)"
                ) from None
            executable = find_chromium(self.options.executable_path)
            playwright = await pw_api.async_playwright().start()
            try:
                browser = await playwright.chromium.launch(
                    executable_path=executable,
                    headless=True,
                    args=launch_args(self.options, allow_private=self.limits.allow_private_addresses),
                    timeout=self.options.launch_timeout * 1000,
                )
                context = await browser.new_context(
                    user_agent=self.limits.user_agent, service_workers="block", accept_downloads=False,
                    **self._viewport(),
                )
            except pw_api.Error as exc:
                with contextlib.suppress(Exception):
                    await playwright.stop()
                raise BrowserUnavailableError(f"could not start Chromium at {executable}: {_first_line(exc)}") from None
            except BaseException:
                with contextlib.suppress(Exception):
                    await playwright.stop()
                raise
            self._errors = pw_api
            self._playwright, self._browser, self._context = playwright, browser, context

    async def _shutdown(self) -> None:
        self._idle_pages.clear()  # closed with their context
        context, browser, playwright = self._context, self._browser, self._playwright
        self._context = self._browser = self._playwright = None
        for closer in (context, browser):
            if closer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closer.close(), timeout=10)
        if playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(playwright.stop(), timeout=10)

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
        host, port = _host_port(request.canonical_url)
        try:
            await self._address_check(host, port, url)  # before a browser is even needed
        except AddressNotAllowedError as exc:
            exc.request = request
            raise
        if self._browser is None or not self._browser.is_connected():
            await self.start()
        total = Timeouts.of(request, self.limits).total
        async with self._semaphore:
            state = _PageState(deadline=time.monotonic() + total)
            try:
                async with asyncio.timeout(total):
                    return await self._render(request, state)
            except TimeoutError:
                raise FetchTimeoutError(
                    f"{url}: the page was not ready within total_timeout={total:g}s "
                    f"(while {state.stage})",
                    url=url,
                    request=request,
                ) from None

    def _guard(self, url: str) -> Awaitable[None]:
        """The address check of ``url``'s host (a hop of the main document)."""
        host, port = _host_port(url)
        return self._address_check(host, port, url)

    async def _acquire_page(self, request: Request) -> Any:
        """An idle page of the pool, or a new one with the guard's routes installed."""
        while self._idle_pages:
            page = self._idle_pages.pop()
            if not page.is_closed():
                return page
        try:
            page = await self._context.new_page()
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

    async def _release_page(self, page: Any, *, reuse: bool) -> None:
        """Back to the pool after a clean fetch (blanked first), else closed."""
        self._page_states.pop(page, None)
        if reuse and not page.is_closed() and self._context is not None:
            try:
                await page.goto("about:blank", timeout=5000)
            except Exception:  # a page that cannot be blanked is closed below
                pass
            else:
                self._idle_pages.append(page)
                return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(page.close(), timeout=10)

    async def _render(self, request: Request, state: _PageState) -> Response:
        page = await self._acquire_page(request)
        self._page_states[page] = state
        self.pages_open += 1
        reuse = False
        try:
            page.set_default_timeout(state.timeout_ms())
            navigate = functools.partial(self._navigate, page, state, request)
            hop = await follow(navigate, request, self.limits, guard=self._guard, guard_first=False)
            reuse = True
            return response_of(request, hop)
        finally:
            self.pages_open -= 1
            await asyncio.shield(self._release_page(page, reuse=reuse))

    async def _navigate(
        self, page: Any, state: _PageState, request: Request, url: str, method: str, body: bytes | None, host: str
    ) -> Hop:
        """One hop of the main document: a navigation to ``url``, whose answer the route handler holds
        to the limits (:meth:`_route_main`); a redirect comes back as one, a page rendered whole."""
        pw = self._errors
        state.redirect = None
        if self.send_gate is not None:
            state.stage = "waiting for the send gate"
            await pass_gate(self.send_gate, host)
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
        await self._wait_for(page, state, request, url)
        return await self._rendered(page, request, state)

    async def _wait_for(self, page: Any, state: _PageState, request: Request, url: str) -> None:
        wait_for = request.meta.get("wait_for", self.options.wait_for)
        if wait_for:
            state.stage = f"waiting for selector {wait_for!r}"
            try:
                await page.wait_for_selector(str(wait_for), state="attached", timeout=state.timeout_ms())
            except self._errors.TimeoutError:
                raise FetchTimeoutError(
                    f"{url}: selector {wait_for!r} did not appear in time", url=url, request=request
                ) from None

    async def _rendered(self, page: Any, request: Request, state: _PageState) -> Hop:
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
        if request.meta.get("crawlherd.screenshot", request.meta.get("screenshot", self.options.screenshot)):
            shot = await page.screenshot(full_page=True, type="png", timeout=state.timeout_ms())
        return Hop(state.main_status, None, page.url, headers, body, encoding, shot)

    # -- the route handler: every request the page makes --------------------------------------------

    async def _route(self, state: _PageState, page: Any, route: Any, routed: Any) -> None:
        pw = self._errors
        try:
            url = routed.url
            if urlsplit(url).scheme not in ("http", "https"):
                state.problems.append(f"refused non-HTTP request {url[:100]}")
                await route.abort("blockedbyclient")
                return
            is_main = routed.is_navigation_request() and routed.frame == page.main_frame
            if not await self._allowed(url, state, main=is_main):
                await route.abort("blockedbyclient")
                return
            if routed.resource_type in self.options.block_resource_types:
                await route.abort("blockedbyclient")
                return
            if routed.resource_type == "websocket":
                await route.continue_()  # the handshake: route_web_socket guards it (see _route_websocket)
            elif is_main:
                await self._route_main(state, route, routed)
            else:
                await self._route_sub(state, route, routed)
        except Exception as exc:
            # The page closed under us (fetch finished or timed out), or the fetch failed in transit:
            # note it and fail this one request; the navigation's own outcome tells the caller.
            if not isinstance(exc, pw.Error):
                state.problems.append(f"{routed.url}: unexpected {type(exc).__name__}: {exc}")
            else:
                state.problems.append(f"{routed.url}: {_first_line(exc)}")
            with contextlib.suppress(Exception):
                await route.abort("failed")

    async def _route_websocket(self, state: _PageState, socket: Any) -> None:
        try:
            if await self._allowed(socket.url, state, main=False):
                socket.connect_to_server()
            else:
                await socket.close(code=1008, reason="refused by the crawlherd address guard")
        except Exception as exc:
            state.problems.append(f"{socket.url}: {_first_line(exc)}")

    async def _allowed(self, url: str, state: _PageState, *, main: bool) -> bool:
        host, port = _host_port(url)
        try:
            await self._address_check(host, port, url)
        except AddressNotAllowedError as exc:
            state.refused.append(url)
            if main and state.error is None:
                state.error = exc
            return False
        return True

    async def _route_main(self, state: _PageState, route: Any, routed: Any) -> None:
        """The main document's hop: fetched here, held to the limits before the browser sees it. A
        redirect is not followed: the navigation is aborted and :func:`follow` makes the next hop."""
        url = routed.url
        try:
            fetched = await route.fetch(max_redirects=0, timeout=state.timeout_ms())
        except self._errors.Error as exc:
            state.error = self._translate(exc, url, None)
            await route.abort("failed")
            return
        location = redirect_location(fetched.status, fetched.headers.get("location"))
        if location is not None:
            state.redirect = (fetched.status, location)
            await fetched.dispose()
            await route.abort("aborted")
            return
        headers = {k.lower(): v for k, v in fetched.headers.items()}
        try:
            self._types.charset(self.limits, headers.get("content-type", ""), fetched.status, url, None)
            declared = headers.get("content-length", "")
            check_length(self.limits, int(declared) if declared.isdigit() else None, url, None)
            body = await fetched.body()
            check_size(self.limits, len(body), url, None)
        except FetchError as exc:
            state.error = exc
            await fetched.dispose()
            await route.abort("blockedbyclient")
            return
        state.main_status, state.main_headers, state.main_body = fetched.status, headers, body
        await route.fulfill(response=fetched, body=body)

    async def _route_sub(self, state: _PageState, route: Any, routed: Any) -> None:
        """A request of the page's own: its redirects followed by :func:`follow` too, each hop guarded."""

        async def hop(url: str, method: str, body: bytes | None, host: str) -> Hop:
            if method != routed.method:  # a 303, or a 301/302 of a POST: now a GET
                fetched = await route.fetch(url=url, method=method, post_data=b"", max_redirects=0,
                                            timeout=state.timeout_ms())
            else:
                fetched = await route.fetch(url=url, max_redirects=0, timeout=state.timeout_ms())
            location = redirect_location(fetched.status, fetched.headers.get("location"))
            if location is not None:
                await fetched.dispose()
                return Hop(fetched.status, location)
            content = await fetched.body()
            if len(content) > self.limits.max_body_size:
                await fetched.dispose()
                check_size(self.limits, len(content), url, None)
            return Hop(fetched.status, None, url, body=content, raw=fetched)

        async def guard(url: str) -> None:
            host, port = _host_port(url)
            try:
                await self._address_check(host, port, url)
            except AddressNotAllowedError:
                state.refused.append(url)
                raise

        try:
            final = await follow(hop, None, self.limits, url=routed.url, method=routed.method, guard=guard,
                                 guard_first=False)
        except AddressNotAllowedError:
            await route.abort("blockedbyclient")
        except FetchError as exc:
            state.problems.append(str(exc))
            await route.abort("failed")
        else:
            await route.fulfill(response=final.raw, body=final.body)

    # -- errors ----------------------------------------------------------------------------------

    def _translate(self, exc: BaseException, url: str, request: Request | None) -> FetchError:
        message = _first_line(exc)
        if isinstance(exc, self._errors.TimeoutError) or "Timeout" in message:
            return FetchTimeoutError(f"{url}: {message}", url=url, request=request)
        if self._browser is not None and not self._browser.is_connected():
            return self._unavailable(exc, request)
        return FetchError(f"{url}: {message}", url=url, request=request)

    def _unavailable(self, exc: BaseException, request: Request | None) -> BrowserUnavailableError:
        url = request.url if request is not None else None
        return BrowserUnavailableError(f"Chromium went away: {_first_line(exc)}", url=url, request=request)
