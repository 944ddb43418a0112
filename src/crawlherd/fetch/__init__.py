"""Fetchers: one request in, one :class:`Response` out (protocol in :mod:`crawlherd.fetch.base`).

- :class:`~crawlherd.fetch.http.HttpFetcher` (aiohttp) and :class:`~crawlherd.fetch.browser.BrowserFetcher`
  (Playwright + system Chromium), imported on first use;
- :class:`MockFetcher`, the in-package test double (a handler function answers, like httpx's
  ``MockTransport``);
- :class:`HostGate`, the per-host send gate every fetcher honours (:mod:`crawlherd.fetch.gate`).
"""

from __future__ import annotations

import importlib
from typing import Any

from crawlherd.fetch.base import DEFAULT_CONTENT_TYPES, Fetcher, FetchLimits, Response
from crawlherd.fetch.gate import HostGate, SendGate
from crawlherd.fetch.mock import MockFetcher, MockHandler, MockResponse

_LAZY = {"HttpFetcher": "crawlherd.fetch.http", "BrowserFetcher": "crawlherd.fetch.browser"}

__all__ = [  # grouped: the protocol and its types, the fetchers, the gate
    "DEFAULT_CONTENT_TYPES", "FetchLimits", "Fetcher", "Response",
    "BrowserFetcher", "HttpFetcher", "MockFetcher", "MockHandler", "MockResponse",
    "HostGate", "SendGate",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'crawlherd.fetch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
