"""crawl4ai's proxy and session names through ``crawlherd.compat.crawl4ai`` (issue 21): ``ProxyConfig``
and ``RoundRobinProxyStrategy`` where crawl4ai's modules have them, ``CrawlerRunConfig(proxy_config=,
proxy_rotation_strategy=, headers=, cookies=)`` and ``BrowserConfig(proxy_config=, cookies=, headers=)``
-- through the package's loopback proxies, to the demo site's ``/ip``, ``/headers`` and ``/cookies``."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from crawlherd.compat.crawl4ai import (
    AsyncWebCrawler,
    BrowserConfig,
    CacheMode,
    CrawlerRunConfig,
    ProxyConfig,
    ProxyRotationStrategy,
    RoundRobinProxyStrategy,
    async_configs,
    proxy_strategy,
)
from crawlherd.demo import DemoSite
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.chromium import CDP_URL_ENV
from tests.servers.proxies import LoopbackProxy, start_http_proxy, start_socks5_proxy


@pytest.fixture
async def site() -> AsyncIterator[DemoSite]:
    async with DemoSite(throttle_every=0) as demo:
        yield demo


@pytest.fixture
async def proxies() -> AsyncIterator[list[LoopbackProxy]]:
    made = [await start_http_proxy("127.0.0.2", auth="al:pw-one"),
            await start_socks5_proxy("127.0.0.3", auth="bo:pw-two"), await start_http_proxy("127.0.0.4")]
    yield made
    for p in made:
        await p.close()


def _json(html: str) -> dict[str, object]:
    """The JSON a page answered (the HTTP fetcher gives it as is)."""
    return json.loads(html)  # type: ignore[no-any-return]


def test_the_names_live_where_crawl4ai_has_them() -> None:
    # crawl4ai: `from crawl4ai import ProxyConfig, RoundRobinProxyStrategy`, `crawl4ai.async_configs.ProxyConfig`,
    # `crawl4ai.proxy_strategy.RoundRobinProxyStrategy` (and ProxyConfig kept there too)
    assert async_configs.ProxyConfig is ProxyConfig is proxy_strategy.ProxyConfig
    assert proxy_strategy.RoundRobinProxyStrategy is RoundRobinProxyStrategy
    assert isinstance(RoundRobinProxyStrategy([]), ProxyRotationStrategy)
    # crawl4ai's from_string forms: credentials taken apart, ip from the server, the password hidden
    p = ProxyConfig.from_string("http://user:s3cr3t@192.168.1.1:8080")
    assert (p.server, p.username, p.password, p.ip) == ("http://192.168.1.1:8080", "user", "s3cr3t", "192.168.1.1")
    assert "s3cr3t" not in repr(p) and p.url == "http://user:s3cr3t@192.168.1.1:8080"
    assert ProxyConfig.from_string("192.168.1.1:8080:user:s3cr3t").to_dict() == p.to_dict()
    assert ProxyConfig.from_string("socks5://proxy.example.com:1080").server == "socks5://proxy.example.com:1080"
    assert ProxyConfig.from_dict(p.to_dict()) == p and p.clone(password="x").password == "x"


async def test_run_config_proxy_rotation_headers_and_cookies_over_http(
    site: DemoSite, proxies: list[LoopbackProxy]
) -> None:
    strategy = RoundRobinProxyStrategy([
        ProxyConfig(server=f"http://127.0.0.1:{proxies[0].port}", username="al", password="pw-one"),
        f"socks5://bo:pw-two@127.0.0.1:{proxies[1].port}",
    ])
    config = CrawlerRunConfig(cache_mode=CacheMode.BYPASS, proxy_rotation_strategy=strategy, verbose=False,
                              headers={"Accept-Language": "de"}, cookies={"consent": "yes"})
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        # the site sets a cookie through one proxy; the run sends it back through the other
        first = await crawler.arun(f"{site.url}/cookies/set?sid=abc", config=config)
        assert first.success, first.error_message
        results = await crawler.arun_many([f"{site.url}/ip", f"{site.url}/headers", f"{site.url}/cookies?x=1",
                                           f"{site.url}/ip?again"], config=config)
    assert all(r.success for r in results), [r.error_message for r in results]
    assert _json(first.html)["cookies"] == {"consent": "yes", "sid": "abc"}  # after the redirect, same proxy
    by_url = {r.url.removeprefix(site.url): _json(r.html) for r in results}
    assert by_url["/headers"]["headers"]["Accept-Language"] == "de"  # type: ignore[index]
    assert by_url["/cookies?x=1"]["cookies"] == {"consent": "yes", "sid": "abc"}
    assert Counter(str(by_url[u]["origin"]) for u in ("/ip", "/ip?again")) == {"127.0.0.2": 1, "127.0.0.3": 1}
    assert proxies[0].seen + proxies[1].seen == 6 and proxies[2].seen == 0  # the first: two hops
    assert all(auth == "Basic YWw6cHctb25l" for _, auth in proxies[0].requests)  # al:pw-one


async def test_browser_config_proxy_cookies_and_headers_in_chromium(
    site: DemoSite, proxies: list[LoopbackProxy], shared_chromium: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CDP_URL_ENV, shared_chromium)  # this process's Chromium, not a new one
    browser = BrowserConfig(
        headless=True, verbose=False,
        proxy_config={"server": f"http://127.0.0.1:{proxies[0].port}", "username": "al", "password": "pw-one"},
        cookies=[{"name": "session", "value": "abc123", "domain": "127.0.0.1"}],
        headers={"Accept-Language": "en-US,en;q=0.9"},
    )
    run = CrawlerRunConfig(verbose=False, page_timeout=30000)
    async with AsyncWebCrawler(config=browser, allow_private_addresses=True) as crawler:
        ip = await crawler.arun(f"{site.url}/ip", config=run)
        headers = await crawler.arun(f"{site.url}/headers", config=run)
        cookies = await crawler.arun(f"{site.url}/cookies", config=run)
        # a run's own proxy wins over the browser's; the browser's cookies and headers still go
        other = CrawlerRunConfig(verbose=False, page_timeout=30000, proxy_config=f"http://127.0.0.1:{proxies[2].port}")
        through_other = await crawler.arun(f"{site.url}/headers", config=other)
        other_ip = await crawler.arun(f"{site.url}/ip", config=other)
        # a run's own headers (crawlherd's CrawlerRunConfig(headers=)) go in the browser too, session or not
        own = await crawler.arun(f"{site.url}/headers", config=run.clone(headers={"X-Run": "yes"}))
        after = await crawler.arun(f"{site.url}/headers", config=run)  # the pooled page forgot them
    for r in (ip, headers, cookies, through_other, other_ip, own, after):
        assert r.success, r.error_message
    assert '"X-Run": "yes"' in own.html and "X-Run" not in after.html
    assert '"Accept-Language": "en-US,en;q=0.9"' in own.html and "session=abc123" in own.html  # over, not instead
    assert '"origin": "127.0.0.2"' in ip.html  # through the browser's proxy
    assert '"Accept-Language": "en-US,en;q=0.9"' in headers.html and '"Accept-Language": "en-US,en;q=0.9"' in \
        through_other.html
    assert '"session": "abc123"' in cookies.html and "session=abc123" in through_other.html
    assert '"origin": "127.0.0.4"' in other_ip.html
    host = site.url.removeprefix("http://")
    assert proxies[0].requests and all(host in line for line, _ in proxies[0].requests)
    assert {auth for _, auth in proxies[0].requests} == {"Basic YWw6cHctb25l"}
    assert proxies[2].seen >= 2


def test_what_is_refused_and_why() -> None:
    with pytest.warns(UserWarning, match="'proxy' parameter is deprecated"):
        legacy = BrowserConfig(proxy="http://u:secret@10.0.0.7:3128")
    assert legacy.proxy_config is not None and legacy.proxy_config.username == "u" and "secret" not in repr(legacy)
    assert BrowserConfig(proxy_config="direct").proxy_config is None
    with pytest.raises(ConfigurationError, match="'domain'"):
        BrowserConfig(cookies=[{"name": "a", "value": "b"}])
    with pytest.raises(ConfigurationError, match="storage_state"):
        BrowserConfig(storage_state={})
    with pytest.raises(ConfigurationError, match="ftp"):
        BrowserConfig(proxy_config="ftp://nope:21")
    with pytest.raises(ConfigurationError, match="proxy_rotation_strategy"):
        CrawlerRunConfig(proxy_config=["http://10.0.0.7:3128", ProxyConfig.DIRECT])
    with pytest.raises(ConfigurationError, match="fetch profile"):
        CrawlerRunConfig(proxy_session_id="sticky")
    with pytest.raises(ConfigurationError, match="certificate"):
        CrawlerRunConfig(fetch_ssl_certificate=True)
