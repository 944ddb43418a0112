"""The engine's run identity (issue 21): crawl4ai's proxy and session names -- ``ProxyConfig``,
``RoundRobinProxyStrategy``, ``CrawlerRunConfig(proxy_config=, proxy_rotation_strategy=, user_agent=,
cookies=)`` -- and ``crawlherd crawl --proxy --header --cookie --user-agent``, through the tests' own
loopback proxies."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from click.testing import CliRunner

from crawlherd import AsyncWebCrawler, CrawlerRunConfig, ProxyConfig, RoundRobinProxyStrategy
from crawlherd.cli import main as cli
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.base import FetchLimits
from tests.servers.proxies import LoopbackProxy, start_http_proxy, start_socks5_proxy
from tests.support.httpserver import Served, start_app

LOOPBACK = FetchLimits(allowed_networks=("127.0.0.0/8",))


@pytest.fixture
async def site() -> AsyncIterator[tuple[Served, list[dict[str, str | None]]]]:
    seen: list[dict[str, str | None]] = []

    async def page(request: web.Request) -> web.Response:
        seen.append({"remote": request.remote, "ua": request.headers.get("User-Agent"),
                     "cookie": request.headers.get("Cookie"), "x": request.headers.get("X-Test")})
        response = web.Response(text="<html><body>ok</body></html>", content_type="text/html")
        if request.path == "/p/0":
            response.set_cookie("visited", "yes")
        return response

    app = web.Application()
    app.router.add_get("/p/{n}", page)
    served = await start_app(app)
    yield served, seen
    await served.close()


@pytest.fixture
async def proxies() -> AsyncIterator[list[LoopbackProxy]]:
    made = [await start_http_proxy("127.0.0.2"), await start_http_proxy("127.0.0.3", auth="al:pw1"),
            await start_socks5_proxy("127.0.0.4", auth="bo:pw2")]
    yield made
    for p in made:
        await p.close()


async def test_crawl4ai_round_robin_rotation(site: tuple[Served, list[dict[str, str | None]]],
                                             proxies: list[LoopbackProxy], monkeypatch: pytest.MonkeyPatch) -> None:
    served, seen = site
    # crawl4ai's documented example: proxies from the environment as ip:port:user:pass
    monkeypatch.setenv("PROXIES", f"127.0.0.1:{proxies[0].port},127.0.0.1:{proxies[1].port}:al:pw1")
    configs = [*ProxyConfig.from_env(), ProxyConfig(server=f"socks5://127.0.0.1:{proxies[2].port}",
                                                    username="bo", password="pw2")]
    assert "pw2" not in repr(configs[2])
    strategy = RoundRobinProxyStrategy(configs)
    run_config = CrawlerRunConfig(proxy_rotation_strategy=strategy, user_agent="Mozilla/5.0 (rotating)",
                                  cookies={"consent": "1"})
    async with AsyncWebCrawler(limits=LOOPBACK) as crawler:
        first = await crawler.arun(f"{served.url}/p/0", config=run_config)
        assert first.success and first.cookies and first.cookies[0]["name"] == "visited"
        results = await crawler.arun_many([f"{served.url}/p/{n}" for n in range(1, 7)], config=run_config)
    assert all(r.success for r in results)
    assert Counter(s["remote"] for s in seen) == {"127.0.0.2": 3, "127.0.0.3": 2, "127.0.0.4": 2}
    assert {s["ua"] for s in seen} == {"Mozilla/5.0 (rotating)"}
    assert seen[0]["cookie"] == "consent=1"
    assert all(s["cookie"] == "consent=1; visited=yes" for s in seen[1:])  # the cookie the site set, sent back


async def test_one_proxy_config_and_a_bad_one(site: tuple[Served, list[dict[str, str | None]]],
                                              proxies: list[LoopbackProxy]) -> None:
    served, seen = site
    config = CrawlerRunConfig(proxy_config={"server": f"http://127.0.0.1:{proxies[1].port}", "username": "al",
                                            "password": "pw1"})
    async with AsyncWebCrawler(limits=LOOPBACK) as crawler:
        assert (await crawler.arun(f"{served.url}/p/1", config=config)).success
    assert [s["remote"] for s in seen] == ["127.0.0.3"]
    with pytest.raises(ConfigurationError):
        CrawlerRunConfig(proxy_config="ftp://nope")
    with pytest.raises(ConfigurationError):
        CrawlerRunConfig(proxy_rotation_strategy=object())


async def test_the_crawl_command_takes_proxies_headers_cookies(
    site: tuple[Served, list[dict[str, str | None]]], proxies: list[LoopbackProxy]
) -> None:
    served, seen = site
    args = ["crawl", *(f"{served.url}/p/{n}" for n in range(1, 5)), "--depth", "0", "--allow-private",
            "--ignore-robots", "--delay", "0", "--json", "--proxy", proxies[0].url, "--proxy", proxies[2].url,
            "--header", "X-Test: yes", "--cookie", "a=b", "--user-agent", "Mozilla/5.0 (cli)"]
    result = await asyncio.to_thread(CliRunner().invoke, cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pages/ok"] == 4
    assert Counter(s["remote"] for s in seen) == {"127.0.0.2": 2, "127.0.0.4": 2}
    assert all(s["ua"] == "Mozilla/5.0 (cli)" and s["x"] == "yes" and s["cookie"] == "a=b" for s in seen)
    assert "pw2" not in result.output
    bad = await asyncio.to_thread(CliRunner().invoke, cli, ["crawl", served.url, "--header", "nocolon"])
    assert bad.exit_code == 2 and "Name: value" in bad.output
