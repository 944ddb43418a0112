"""The tests' forward proxies on loopback: the package's own (:mod:`crawlherd.demo.proxies`), which the
docs use too -- an HTTP proxy (absolute-URI requests and CONNECT) and a SOCKS5 proxy, each connecting to
the site from its own ``127.0.0.N`` and noting the requests it carried."""

from __future__ import annotations

from crawlherd.demo.proxies import LoopbackProxy, start_http_proxy, start_socks5_proxy

__all__ = ["LoopbackProxy", "start_http_proxy", "start_socks5_proxy"]
