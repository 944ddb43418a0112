"""The route handler of a :class:`~crawlherd.fetch.browser.BrowserFetcher`'s pages: every request a page
makes comes here (:class:`PageRoutes`), is checked by the address guard -- each redirect hop too -- and
is fetched by Playwright's request context with redirects off; the main document is held to the
content-type allow-list and the body-size limit before the browser sees it. What the handler learns
while one fetch's page loads is its :class:`PageState`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from crawlherd.errors import AddressNotAllowedError, FetchError
from crawlherd.fetch.actions import PageActions
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.chromium import BrowserOptions
from crawlherd.fetch.hops import AcceptedTypes, Hop, check_length, check_size, follow, redirect_location
from crawlherd.request import Request

__all__ = ["AddressCheck", "PageRoutes", "PageState", "first_line", "host_port"]

#: ``check(host, port, url)``: raise AddressNotAllowedError to refuse a request.
AddressCheck = Callable[[str, int, str], Awaitable[None]]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    return parts.hostname or "", port


@dataclass
class PageState:
    """What the route handler learnt while one fetch's page loaded."""

    deadline: float
    error: FetchError | None = None
    redirect: tuple[int, str] | None = None  # the main document's answer was a redirect: (status, location)
    main_status: int = 0
    main_headers: dict[str, str] = field(default_factory=dict)
    main_body: bytes = b""
    refused: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    actions: PageActions = field(default_factory=PageActions)
    #: The request's own headers (a run's ``CrawlerRunConfig(headers=)``), sent with the main document.
    headers: dict[str, str] = field(default_factory=dict)
    navigated: bool = False  # the main document was rendered: a screenshot of a failure shows something

    stage: str = "starting"

    def timeout_ms(self) -> float:
        # A little under the total deadline, so Playwright's own (more specific) timeout fires first.
        return max(1.0, (self.deadline - time.monotonic()) * 1000 - 250)



class PageRoutes:
    """The route handler's methods (a part of :class:`~crawlherd.fetch.browser.BrowserFetcher`)."""

    limits: FetchLimits
    options: BrowserOptions
    _address_check: AddressCheck
    _types: AcceptedTypes
    _errors: Any

    def _translate(self, exc: BaseException, url: str, request: Request | None) -> FetchError:
        raise NotImplementedError

    async def _route(self, state: PageState, page: Any, route: Any, routed: Any) -> None:
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
                state.problems.append(f"{routed.url}: {first_line(exc)}")
            with contextlib.suppress(Exception):
                await route.abort("failed")

    async def _route_websocket(self, state: PageState, socket: Any) -> None:
        try:
            if await self._allowed(socket.url, state, main=False):
                socket.connect_to_server()
            else:
                await socket.close(code=1008, reason="refused by the crawlherd address guard")
        except Exception as exc:
            state.problems.append(f"{socket.url}: {first_line(exc)}")

    async def _allowed(self, url: str, state: PageState, *, main: bool) -> bool:
        host, port = host_port(url)
        try:
            await self._address_check(host, port, url)
        except AddressNotAllowedError as exc:
            state.refused.append(url)
            if main and state.error is None:
                state.error = exc
            return False
        return True

    async def _route_main(self, state: PageState, route: Any, routed: Any) -> None:
        """The main document's hop: fetched here, held to the limits before the browser sees it. A
        redirect is not followed: the navigation is aborted and :func:`follow` makes the next hop."""
        url = routed.url
        try:
            own = {"headers": {**routed.headers, **state.headers}} if state.headers else {}
            fetched = await route.fetch(max_redirects=0, timeout=state.timeout_ms(), **own)
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

    async def _route_sub(self, state: PageState, route: Any, routed: Any) -> None:
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
            host, port = host_port(url)
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
