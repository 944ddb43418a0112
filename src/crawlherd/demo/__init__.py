"""The built-in demo: a job board on loopback that ``crawlherd demo`` and the tests crawl.

- :mod:`crawlherd.demo.board`: the board's data, deterministic from a seed (no I/O);
- :mod:`crawlherd.demo.pages`: its HTML (and ``render.js``, the JavaScript-rendered listing);
- :mod:`crawlherd.demo.site`: :class:`DemoSite`, the aiohttp app serving it, with its request log
  (:mod:`crawlherd.demo.log`);
- :mod:`crawlherd.demo.targets`: the demo's targets document and what crawling it must find;
- :mod:`crawlherd.demo.proxies`: forward proxies on loopback (HTTP and SOCKS5, with credentials or not),
  each seen by the site as its own client address.

Serve it by hand: ``python -m crawlherd.demo --port 8080``.
"""

from __future__ import annotations

from crawlherd.demo.proxies import LoopbackProxy, start_http_proxy, start_socks5_proxy
from crawlherd.demo.site import DemoSite

__all__ = ["DemoSite", "LoopbackProxy", "start_http_proxy", "start_socks5_proxy"]
