"""crawl4ai's configuration objects on crawlherd: every option honoured or refused by name, the cache
modes changing what is fetched, the delays of arun_many's default dispatcher."""

from __future__ import annotations

import pytest

from crawlherd.compat.crawl4ai import AsyncWebCrawler, BrowserConfig, CacheMode, CrawlerRunConfig
from crawlherd.errors import ConfigurationError
from tests.compat.conftest import Site


def test_run_config_defaults_and_crawl4ai_names() -> None:
    config = CrawlerRunConfig()
    assert (config.mean_delay, config.max_range, config.semaphore_count) == (0.1, 0.3, 5)
    assert config.cache_mode == "bypass"
    custom = CrawlerRunConfig(mean_delay=2.0, max_range=1.0, cache_mode=CacheMode.ENABLED, page_timeout=30000)
    assert (custom.mean_delay, custom.max_range, custom.cache_mode) == (2.0, 1.0, "enabled")
    assert custom.total_timeout == 30.0
    streamed = custom.clone(stream=True)
    assert isinstance(streamed, CrawlerRunConfig)
    assert streamed.stream and streamed.mean_delay == 2.0


@pytest.mark.parametrize(
    ("option", "words"),
    [("js_code", "does not run scripts"), ("session_id", "keeps no page"), ("strem", "did you mean stream"),
     ("url_matcher", "one config")],
)
def test_run_config_refuses_what_it_cannot_honour(option: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=option) as err:
        CrawlerRunConfig(**{option: "x"})
    assert words in str(err.value)


def test_run_config_refuses_deep_crawl_and_bad_values() -> None:
    with pytest.raises(ConfigurationError, match="crawler.crawl"):
        CrawlerRunConfig(deep_crawl_strategy=object())
    with pytest.raises(ConfigurationError, match="mean_delay"):
        CrawlerRunConfig(mean_delay=-1)
    with pytest.raises(ConfigurationError, match="markdown_generator"):
        CrawlerRunConfig(markdown_generator="not a generator")


def test_browser_config_options() -> None:
    config = BrowserConfig(headless=True, verbose=False, viewport_width=1024, viewport_height=768, text_mode=True)
    options = config.browser_options()
    assert (options.viewport_width, options.viewport_height) == (1024, 768)
    assert set(options.block_resource_types) == {"image", "media", "font"}
    assert config.clone(viewport_width=800).browser_options().viewport_width == 800
    for option, value in (("headless", False), ("browser_type", "firefox"), ("user_data_dir", "/tmp/x")):
        with pytest.raises(ConfigurationError, match=option):
            BrowserConfig(**{option: value})


async def test_cache_modes_change_what_is_fetched(site: Site) -> None:
    url = site.url + "/cached"
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        await crawler.arun(url, config=CrawlerRunConfig(cache_mode=CacheMode.READ_ONLY, verbose=False))
        await crawler.arun(url, config=CrawlerRunConfig(cache_mode=CacheMode.READ_ONLY, verbose=False))
        assert site.hits["/cached"] == 2  # read-only never adds to the cache
        await crawler.arun(url, config=CrawlerRunConfig(cache_mode=CacheMode.WRITE_ONLY, verbose=False))
        await crawler.arun(url, config=CrawlerRunConfig(cache_mode=CacheMode.WRITE_ONLY, verbose=False))
        assert site.hits["/cached"] == 4  # write-only always fetches, and keeps the page
        hit = await crawler.arun(url, config=CrawlerRunConfig(cache_mode=CacheMode.READ_ONLY, verbose=False))
        assert hit.success and site.hits["/cached"] == 4
        for mode in (CacheMode.BYPASS, CacheMode.DISABLED):
            await crawler.arun(url, config=CrawlerRunConfig(cache_mode=mode, verbose=False))
        assert site.hits["/cached"] == 6
        await crawler.arun(url, config=CrawlerRunConfig(cache_mode=CacheMode.ENABLED, verbose=False))
        assert site.hits["/cached"] == 6


async def test_private_addresses_follow_the_settings(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRAWLHERD_ALLOW_PRIVATE_ADDRESSES", raising=False)
    monkeypatch.chdir("/")  # no crawlherd.toml of the working directory
    async with AsyncWebCrawler() as crawler:
        refused = await crawler.arun(site.url)
    assert not refused.success and refused.error_type == "AddressNotAllowedError"
    monkeypatch.setenv("CRAWLHERD_ALLOW_PRIVATE_ADDRESSES", "1")
    async with AsyncWebCrawler() as crawler:
        allowed = await crawler.arun(site.url)
    assert allowed.success
