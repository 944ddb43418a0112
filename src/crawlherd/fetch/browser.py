"""``BrowserFetcher``: Playwright driving the system Chromium, for targets with ``requires_playwright``.

The browser never touches the network by itself: every request the page makes goes through a route
handler that runs the address guard on its URL and fetches it through Playwright's request context
with redirects turned off, so each redirect hop is checked too. The main document must pass the
content-type allow-list and the body-size limit before the browser sees it; its redirects are
followed (and counted against ``max_redirects``) by this fetcher, one navigation per hop, each after
the send gate. The whole fetch runs under ``total_timeout`` (or the request's
``meta["crawlherd.timeouts"]["total"]``); the rendered HTML is held to ``max_body_size`` as well.

Which Chromium: the ``executable_path`` option, else ``$CRAWLHERD_CHROMIUM``, else ``/usr/bin/chromium``,
else ``chromium`` / ``chromium-browser`` on ``PATH``. crawlherd never downloads a browser
(``apt-get install chromium`` on Debian/Ubuntu). Without Playwright (``pip install 'crawlherd[browser]'``)
or without a browser, :class:`~crawlherd.errors.BrowserUnavailableError` says which is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from crawlherd._options import Count, Seconds, check_options
from crawlherd.content_type import charset_of, media_type
from crawlherd.errors import (
    AddressNotAllowedError,
    BodyTooLargeError,
    BrowserUnavailableError,
    ConfigurationError,
    ContentTypeError,
    FetchError,
    FetchTimeoutError,
    TooManyRedirectsError,
)
from crawlherd.fetch.base import FetchLimits, Response, Timeouts
from crawlherd.fetch.gate import SendGate, hop_host, pass_gate
from crawlherd.fetch.guard import check_address, parse_networks
from crawlherd.request import Request

__all__ = ["CHROMIUM_ARGS", "LOCAL_NETWORK_ARGS", "AddressCheck", "BrowserFetcher", "BrowserOptions", "find_chromium"]

#: Command-line switches Chromium is launched with: no sandbox (containers), no GPU, and none of the
#: background traffic (QUIC, updates, sync) that would bypass the route handler.
CHROMIUM_ARGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
#: Added when private addresses are allowed: Chromium's own local-network-access checks would block a
#: page (whose document the route fulfilled, so it has no address of its own) from reaching loopback
#: or private hosts that the address guard let through. The guard stays the authority.
LOCAL_NETWORK_ARGS: tuple[str, ...] = (
    "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks",
)
_RESOURCE_TYPES = frozenset(
    {
        "document",
        "stylesheet",
        "image",
        "media",
        "font",
        "script",
        "texttrack",
        "xhr",
        "fetch",
        "eventsource",
        "websocket",
        "manifest",
        "other",
    }
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_INSTALL_HINT = (
    "install it with `apt-get install chromium` (Debian/Ubuntu) or point CRAWLHERD_CHROMIUM (or the "
    "executable_path option) at a Chromium/Chrome binary; crawlherd never downloads a browser"
)

#: ``check(host, port, url)``: raise AddressNotAllowedError to refuse a request.
AddressCheck = Callable[[str, int, str], Awaitable[None]]


def find_chromium(executable_path: str | None = None) -> str:
    """The Chromium to launch: ``executable_path``, ``$CRAWLHERD_CHROMIUM``, ``/usr/bin/chromium``,
    then ``chromium`` / ``chromium-browser`` on PATH. An explicit path that is not an executable, or
    no browser at all, raises BrowserUnavailableError."""
    for source, explicit in (
        ("executable_path", executable_path),
        ("CRAWLHERD_CHROMIUM", os.environ.get("CRAWLHERD_CHROMIUM")),
    ):
        if explicit:
            if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
                return explicit
            raise BrowserUnavailableError(f"{source}={explicit!r} is not an executable file; {_INSTALL_HINT}")
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise BrowserUnavailableError(f"no Chromium found; {_INSTALL_HINT}")


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
    redirect_to: str | None = None
    main_status: int = 0
    main_headers: dict[str, str] = field(default_factory=dict)
    main_body: bytes = b""
    refused: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    stage: str = "starting"

    def timeout_ms(self) -> float:
        # A little under the total deadline, so Playwright's own (more specific) timeout fires first.
        return max(1.0, (self.deadline - time.monotonic()) * 1000 - 250)


WaitUntil = Literal["commit", "domcontentloaded", "load", "networkidle"]


@dataclass(frozen=True, kw_only=True)
class BrowserOptions:
    """How :class:`BrowserFetcher` drives Chromium. ``executable_path`` of the browser (default: see
    :func:`find_chromium`); ``max_pages`` open at once; ``wait_until`` a page is ``load``-ed (or
    ``domcontentloaded``, ``networkidle``, ``commit``) and then, if given, until the CSS selector
    ``wait_for`` is on it; ``screenshot`` of every page (a PNG); ``block_resource_types`` the page may
    not load (e.g. ``image``, ``font``; never ``document``); ``extra_args`` for Chromium;
    ``launch_timeout`` seconds for the browser to start."""

    executable_path: str | None = None
    max_pages: Count = 4
    wait_until: WaitUntil = "networkidle"
    wait_for: str | None = None
    screenshot: bool = False
    block_resource_types: Iterable[str] = ()
    extra_args: Iterable[str] = ()
    launch_timeout: Seconds = 30.0

    def __post_init__(self) -> None:
        check_options(self, "BrowserFetcher")
        if self.wait_for is not None and (not isinstance(self.wait_for, str) or not self.wait_for.strip()):
            raise ConfigurationError(f"BrowserFetcher wait_for must be a non-empty selector, got {self.wait_for!r}")
        blocked = frozenset(self.block_resource_types)
        if blocked - _RESOURCE_TYPES:
            raise ConfigurationError(
                f"BrowserFetcher block_resource_types: unknown {sorted(blocked - _RESOURCE_TYPES)}; "
                f"known: {sorted(_RESOURCE_TYPES)}"
            )
        if "document" in blocked:
            raise ConfigurationError("BrowserFetcher block_resource_types cannot block 'document'")
        object.__setattr__(self, "block_resource_types", blocked)
        object.__setattr__(self, "extra_args", tuple(self.extra_args))


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

    #: It renders pages, so ``CrawlerRunConfig(screenshot=True)`` gets a PNG (the Crawler checks this).
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
                    args=[
                        *CHROMIUM_ARGS,
                        *(LOCAL_NETWORK_ARGS if self.limits.allow_private_addresses else ()),
                        *self.options.extra_args,
                    ],
                    timeout=self.options.launch_timeout * 1000,
                )
                context = await browser.new_context(
                    user_agent=self.limits.user_agent, service_workers="block", accept_downloads=False
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

    async def fetch(self, request: Request) -> Response:
        """Render ``request.url`` in a page of its own and return the resulting HTML."""
        url = request.url
        if request.method != "GET":
            raise FetchError(f"{url}: BrowserFetcher fetches GET only, not {request.method}", url=url, request=request)
        host, port = _host_port(request.canonical_url)
        try:
            await self._address_check(host, port, url)
        except AddressNotAllowedError as exc:
            exc.request = request
            raise
        if self._browser is None or not self._browser.is_connected():
            await self.start()
        total = Timeouts.of(request, self.limits).total
        async with self._semaphore:
            started = time.monotonic()
            state = _PageState(deadline=started + total)
            try:
                async with asyncio.timeout(total):
                    return await self._render(request, state, started)
            except TimeoutError:
                raise FetchTimeoutError(
                    f"{url}: the page was not ready within total_timeout={total:g}s "
                    f"(while {state.stage})",
                    url=url,
                    request=request,
                ) from None

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

    async def _render(self, request: Request, state: _PageState, started: float) -> Response:
        pw = self._errors
        page = await self._acquire_page(request)
        self._page_states[page] = state
        self.pages_open += 1
        reuse = False
        try:
            page.set_default_timeout(state.timeout_ms())
            url = request.url
            hops: list[str] = []
            response: Any = None
            while True:
                state.redirect_to = None
                if self.send_gate is not None:
                    state.stage = "waiting for the send gate"
                    await pass_gate(self.send_gate, hop_host(url) if hops else request.host)
                state.stage = f"loading {url}"
                try:
                    response = await page.goto(url, wait_until=self.options.wait_until, timeout=state.timeout_ms())
                except pw.TimeoutError:
                    if state.error is not None:
                        raise self._with_request(state.error, request) from None
                    raise FetchTimeoutError(
                        f"{url}: navigation did not reach {self.options.wait_until!r} in time", url=url, request=request
                    ) from None
                except pw.Error as exc:
                    if state.error is not None:
                        raise self._with_request(state.error, request) from None
                    if state.redirect_to is None:
                        raise self._translate(exc, url, request) from None
                if state.error is not None:
                    raise self._with_request(state.error, request)
                if state.redirect_to is None:
                    break
                hops.append(url)
                if len(hops) > self.limits.max_redirects:
                    raise TooManyRedirectsError(
                        f"{request.url}: more than max_redirects={self.limits.max_redirects} redirects "
                        f"({' -> '.join([*hops, state.redirect_to])})",
                        url=request.url,
                        request=request,
                    )
                url = state.redirect_to
            if response is None:
                raise FetchError(f"{url}: the browser got no response", url=url, request=request)
            wait_for = request.meta.get("wait_for", self.options.wait_for)
            if wait_for:
                state.stage = f"waiting for selector {wait_for!r}"
                try:
                    await page.wait_for_selector(str(wait_for), state="attached", timeout=state.timeout_ms())
                except pw.TimeoutError:
                    raise FetchTimeoutError(
                        f"{url}: selector {wait_for!r} did not appear in time", url=url, request=request
                    ) from None
            response_out = await self._response(page, request, state, started, tuple(hops))
            reuse = True
            return response_out
        finally:
            self.pages_open -= 1
            await asyncio.shield(self._release_page(page, reuse=reuse))

    async def _response(
        self, page: Any, request: Request, state: _PageState, started: float, hops: tuple[str, ...]
    ) -> Response:
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
        if len(body) > self.limits.max_body_size:
            raise BodyTooLargeError(
                f"{page.url}: rendered page is {len(body)} bytes, over max_body_size={self.limits.max_body_size}",
                url=page.url,
                request=request,
            )
        shot = None
        state.stage = "taking the screenshot"
        if request.meta.get("crawlherd.screenshot", request.meta.get("screenshot", self.options.screenshot)):
            shot = await page.screenshot(full_page=True, type="png", timeout=state.timeout_ms())
        return Response(
            url=page.url,
            status=state.main_status,
            headers=headers,
            body=body,
            request=request,
            elapsed=time.monotonic() - started,
            redirects=hops,
            screenshot=shot,
            encoding=encoding,
        )

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
        url = routed.url
        try:
            fetched = await route.fetch(max_redirects=0, timeout=state.timeout_ms())
        except self._errors.Error as exc:
            state.error = self._translate(exc, url, None)
            await route.abort("failed")
            return
        location = fetched.headers.get("location")
        if 300 <= fetched.status < 400 and location:
            state.redirect_to = urljoin(url, location)
            await fetched.dispose()
            await route.abort("aborted")  # the fetch loop navigates to the next hop itself
            return
        headers = {k.lower(): v for k, v in fetched.headers.items()}
        if fetched.status < 400:
            try:
                self.limits.check_content_type(headers.get("content-type", ""), url=url)
            except ContentTypeError as exc:
                state.error = exc
                await fetched.dispose()
                await route.abort("blockedbyclient")
                return
        declared = headers.get("content-length", "")
        size = int(declared) if declared.isdigit() else 0
        body = b""
        if size <= self.limits.max_body_size:
            body = await fetched.body()
            size = len(body)
        if size > self.limits.max_body_size:
            state.error = BodyTooLargeError(
                f"{url}: body is {size} bytes, over max_body_size={self.limits.max_body_size}", url=url
            )
            await fetched.dispose()
            await route.abort("blockedbyclient")
            return
        state.main_status, state.main_headers, state.main_body = fetched.status, headers, body
        await route.fulfill(response=fetched, body=body)

    async def _route_sub(self, state: _PageState, route: Any, routed: Any) -> None:
        current = routed.url
        method = routed.method
        changed_method = False
        for _ in range(self.limits.max_redirects + 1):
            if changed_method:
                fetched = await route.fetch(
                    url=current, method="GET", post_data=b"", max_redirects=0, timeout=state.timeout_ms()
                )
            else:
                fetched = await route.fetch(url=current, max_redirects=0, timeout=state.timeout_ms())
            location = fetched.headers.get("location")
            if not (300 <= fetched.status < 400 and location):
                body = await fetched.body()
                if len(body) > self.limits.max_body_size:
                    state.problems.append(f"{current}: {len(body)} bytes, over max_body_size")
                    await fetched.dispose()
                    await route.abort("failed")
                    return
                await route.fulfill(response=fetched, body=body)
                return
            await fetched.dispose()
            current = urljoin(current, location)
            if fetched.status in (301, 302, 303) and method not in ("GET", "HEAD"):
                method, changed_method = "GET", True
            if urlsplit(current).scheme not in ("http", "https") or not await self._allowed(current, state, main=False):
                await route.abort("blockedbyclient")
                return
        state.problems.append(f"{routed.url}: more than max_redirects={self.limits.max_redirects} redirects")
        await route.abort("failed")

    # -- errors ----------------------------------------------------------------------------------

    @staticmethod
    def _with_request(error: FetchError, request: Request) -> FetchError:
        error.request = request
        return error

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
