"""Crawlo's duplicate filters and fingerprints on crawlherd: method, canonical URL and body; headers
and meta only when named; the memory filter's async calls and capacity; the file and Redis filters."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from crawlherd.compat.crawlo.filters.aioredis_filter import AioRedisFilter
from crawlherd.compat.crawlo.filters.memory_filter import MemoryFileFilter, MemoryFilter
from crawlherd.compat.crawlo.settings.setting_manager import SettingManager
from crawlherd.compat.crawlo.utils.request.fingerprint import FingerprintGenerator, generate_request_fingerprint
from crawlherd.compat.crawlo.utils.request.request import request_fingerprint
from crawlherd.request import Request as FrontierRequest

URL = "https://example.com/news/1.html"


class Req:
    def __init__(self, url: str = URL, headers: dict[str, str] | None = None, body: bytes = b"",
                 meta: dict[str, Any] | None = None) -> None:
        self.method, self.url, self.body = "GET", url, body
        self.headers, self.meta = headers or {}, meta or {}


class Crawler:
    def __init__(self, **settings: Any) -> None:
        self.settings = SettingManager(settings)
        self.stats = None


def test_fingerprints() -> None:
    def fp(**kw: Any) -> str:
        return generate_request_fingerprint("GET", kw.pop("url", URL), kw.pop("body", b""), kw.pop("headers", {}),
                                            kw.pop("meta", {}), kw.pop("include", None))

    assert fp(headers={"User-Agent": "A"}) == fp(headers={"User-Agent": "B"})
    assert fp(body=b"a=1") != fp(body=b"a=2")
    assert fp() != fp(url=URL + "?page=2")
    assert fp(headers={"User-Agent": "A"}, include=["User-Agent"]) != fp(headers={"User-Agent": "B"},
                                                                          include=["User-Agent"])
    assert fp(headers={"user-agent": "A"}, include=["User-Agent"]) == fp(headers={"User-Agent": "A"},
                                                                          include=["User-Agent"])
    assert fp(meta={"slot": "a"}) != fp(meta={"slot": "b"})
    assert fp(url="https://EXAMPLE.com/news/1.html#top") == fp()  # crawlherd's canonical URL
    assert fp() == FrontierRequest(URL).fingerprint.hex() == FingerprintGenerator.request_fingerprint("GET", URL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        a, b = Req(headers={"User-Agent": "A"}), Req(headers={"User-Agent": "B"})
        assert request_fingerprint(a) == request_fingerprint(b)
        assert request_fingerprint(a, include_headers=["User-Agent"]) != request_fingerprint(b, ["User-Agent"])


def test_filters_follow_the_include_settings() -> None:
    plain = MemoryFilter(Crawler())
    assert plain._get_fingerprint(Req(headers={"Cookie": "1"})) == plain._get_fingerprint(Req(headers={"Cookie": "2"}))
    named = MemoryFilter(Crawler(DUPEFILTER_INCLUDE_HEADERS=["Cookie"], DUPEFILTER_INCLUDE_META=["slot"]))
    assert named._get_fingerprint(Req(headers={"Cookie": "1"})) != named._get_fingerprint(Req(headers={"Cookie": "2"}))
    assert named._get_fingerprint(Req(meta={"slot": 1})) != named._get_fingerprint(Req(meta={"slot": 2}))
    assert named._get_fingerprint(Req(meta={"other": 1})) == named._get_fingerprint(Req(meta={"other": 2}))
    shared = AioRedisFilter(redis_key="k", client=None)
    one, two = Req(headers={"Cookie": "1"}), Req(headers={"Cookie": "2"})
    assert shared._get_fingerprint(one) == shared._get_fingerprint(two)


async def test_memory_filter_async_calls() -> None:
    filt = MemoryFilter(Crawler(MEMORY_FILTER_MAX_CAPACITY=10, MEMORY_FILTER_CLEANUP_THRESHOLD=0.5))
    requests = [Req(f"http://example.com/{i}") for i in range(8)]
    assert await asyncio.gather(*(filt.requested_async(r) for r in requests)) == [False] * 8
    assert await asyncio.gather(*(filt.requested_async(r) for r in requests)) == [True] * 8
    await filt.add_fingerprint_async("fp1")
    await filt.add_fingerprint_async("fp1")
    assert "fp1" in filt and filt._unique_count == 9
    await filt.add_fingerprint_async("fp2")
    await filt.add_fingerprint_async("fp3")  # over capacity: the oldest go, down to half
    assert len(filt) == 6 and "fp3" in filt
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert filt.requested(Req("http://example.com/sync")) is False
    assert any(issubclass(w.category, DeprecationWarning) and "deprecated" in str(w.message) for w in caught)
    await filt.clear_async()
    assert len(filt.fingerprints) == 0 and filt._unique_count == 0


async def test_file_filter_remembers_across_instances(tmp_path: Any) -> None:
    first = MemoryFileFilter(Crawler(REQUEST_DIR=str(tmp_path)))
    await first.add_fingerprint_async("fp1")
    assert await first.contains_async("fp1") and not await first.contains_async("fp2")
    await first.close_async()
    second = MemoryFileFilter(Crawler(REQUEST_DIR=str(tmp_path)))
    assert "fp1" in second
    second.close()


async def test_redis_filter_is_shared(redis_url: str, unique_name: str) -> None:
    crawler = Crawler(REDIS_URL=redis_url, PROJECT_NAME=unique_name, REDIS_TTL=60)
    one, two = AioRedisFilter.create_instance(crawler), AioRedisFilter.create_instance(crawler)
    assert one.redis_key == f"crawlo:{unique_name}:filter:fingerprint"
    try:
        assert await one.requested_async(Req()) is False
        assert await two.requested_async(Req(headers={"User-Agent": "other"})) is True
        assert await two.contains_async(one._get_fingerprint(Req()))
    finally:
        await one.closed()
        await two.closed()
    with pytest.raises(Exception, match="no Redis"):
        await AioRedisFilter(redis_key="k").requested_async(Req())
