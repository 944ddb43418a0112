"""Crawlo's ``Request`` (``crawlo.http.request``): what a Crawlo spider yields and its scheduler queues.

It carries what Crawlo's carries (callbacks, ``meta``, ``cb_kwargs``, ``dont_filter`` ...) and keeps
Crawlo's convention for ``priority``: given as "larger is more urgent", stored negated
(``Request(url, priority=5).priority == -5``) so that a queue taking the smallest first takes it first.
:meth:`to_frontier` is the :class:`crawlherd.request.Request` the queues put into crawlherd's frontier
(the URL checked and canonicalised there: a malformed one raises
:class:`~crawlherd.errors.InvalidURLError` when it is queued).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from crawlherd.request import Request as FrontierRequest

__all__ = ["Request", "RequestPriority"]


class RequestPriority:
    """Crawlo's named priorities (larger is more urgent)."""

    URGENT = 200
    HIGH = 100
    NORMAL = 0
    LOW = -100
    BACKGROUND = -200


def _with_params(url: str, params: dict[str, Any] | None) -> str:
    if not params:
        return url
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(params, doseq=True)) if q)
    return urlunsplit(parts._replace(query=query))


class Request:
    """``Request(url, callback=None, errback=None, method="GET", headers=None, body=None,
    form_data=None, json_body=None, params=None, cb_kwargs=None, cookies=None, meta=None, priority=0,
    dont_filter=False, timeout=None, proxy=None, allow_redirects=True, auth=None, verify=True,
    flags=None, encoding=None)``. ``params`` are appended to the URL's query; ``form_data`` and
    ``json_body`` become the body (POST unless a method is given) with their content type; a ``dict``
    body is sent as JSON."""

    def __init__(
        self,
        url: str,
        callback: Callable[..., Any] | None = None,
        errback: Callable[..., Any] | None = None,
        method: str | None = "GET",
        headers: dict[str, str] | None = None,
        body: bytes | str | dict[Any, Any] | None = None,
        form_data: dict[str, Any] | None = None,
        json_body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        cb_kwargs: dict[str, Any] | None = None,
        cookies: dict[str, str] | None = None,
        meta: dict[str, Any] | None = None,
        priority: int = RequestPriority.NORMAL,
        dont_filter: bool = False,
        timeout: float | None = None,
        proxy: str | None = None,
        allow_redirects: bool = True,
        auth: tuple[str, str] | None = None,
        verify: bool = True,
        flags: list[str] | None = None,
        encoding: str | None = None,
    ) -> None:
        self.url = _with_params(url, params)
        self.callback = callback
        self.errback = errback
        self.method = (method or "GET").upper()
        self.headers: dict[str, str] = dict(headers or {})
        self.cb_kwargs: dict[str, Any] = dict(cb_kwargs or {})
        self.cookies: dict[str, str] = dict(cookies or {})
        self.meta: dict[str, Any] = dict(meta or {})
        self.priority = -int(priority)  # Crawlo's storage: negated, the smallest is taken first
        self.dont_filter = dont_filter
        self.timeout = timeout
        self.proxy = proxy
        self.allow_redirects = allow_redirects
        self.auth = auth
        self.verify = verify
        self.flags: list[str] = list(flags or [])
        self.encoding = encoding or "utf-8"
        self.body = self._body(body, form_data, json_body, method)

    def _body(self, body: Any, form_data: Any, json_body: Any, method: str | None) -> bytes:
        if json_body is not None:
            self.headers.setdefault("Content-Type", "application/json")
            self.method = "POST" if method in (None, "GET") else self.method
            return json.dumps(json_body, ensure_ascii=False).encode(self.encoding)
        if form_data is not None:
            self.headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
            self.method = "POST" if method in (None, "GET") else self.method
            return urlencode(form_data, doseq=True).encode(self.encoding)
        if isinstance(body, dict):
            self.headers.setdefault("Content-Type", "application/json")
            return json.dumps(body, ensure_ascii=False).encode(self.encoding)
        if isinstance(body, str):
            return body.encode(self.encoding)
        return body or b""

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.url} priority={-self.priority}>"

    def __lt__(self, other: Request) -> bool:
        return self.priority < other.priority

    def to_frontier(self, *, priority: int | None = None, dedup_key: str | None = None) -> FrontierRequest:
        """This request for crawlherd's frontier: ``priority`` there is "larger first" (default: this
        request's own, un-negated); ``dedup_key`` makes a request the filter lets through twice a
        new one (``dont_filter``)."""
        return FrontierRequest(
            self.url,
            method=self.method,
            priority=-self.priority if priority is None else priority,
            headers=self.headers or None,
            body=self.body or None,
            dedup_key=dedup_key,
        )
