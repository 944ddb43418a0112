"""BrowserFetcher's options, browser discovery and errors that need no browser."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from crawlherd.errors import AddressNotAllowedError, BrowserUnavailableError, ConfigurationError, FetchError
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.browser import BrowserFetcher, BrowserOptions, find_chromium
from crawlherd.request import Request


def _fake_browser(tmp_path: Path, name: str = "chrome") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def test_find_chromium_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    option, env = _fake_browser(tmp_path, "opt-chrome"), _fake_browser(tmp_path, "env-chrome")
    monkeypatch.setenv("CRAWLHERD_CHROMIUM", env)
    assert find_chromium(option) == option
    assert find_chromium() == env
    monkeypatch.setenv("CRAWLHERD_CHROMIUM", str(tmp_path / "missing"))
    with pytest.raises(BrowserUnavailableError, match="CRAWLHERD_CHROMIUM=.*missing.*apt-get install chromium"):
        find_chromium()
    not_executable = tmp_path / "plain-file"
    not_executable.write_text("")
    with pytest.raises(BrowserUnavailableError, match="executable_path=.*plain-file"):
        find_chromium(str(not_executable))


def test_no_browser_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRAWLHERD_CHROMIUM", raising=False)
    monkeypatch.setattr("os.access", lambda path, mode: False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(BrowserUnavailableError, match="no Chromium found.*never downloads a browser"):
        find_chromium()


async def test_no_playwright_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "playwright.async_api", None)
    fetcher = BrowserFetcher(options=BrowserOptions(executable_path=_fake_browser(tmp_path)))
    with pytest.raises(BrowserUnavailableError, match=r"pip install 'crawlherd\[browser\]'"):
        await fetcher.start()
    assert not fetcher.started


async def test_a_browser_that_does_not_start_is_unavailable(tmp_path: Path) -> None:
    pytest.importorskip("playwright.async_api", reason="needs Playwright (crawlherd[browser])")
    fetcher = BrowserFetcher(options=BrowserOptions(executable_path=_fake_browser(tmp_path), launch_timeout=20))
    with pytest.raises(BrowserUnavailableError, match="could not start Chromium at"):
        await fetcher.start()
    assert not fetcher.started
    await fetcher.close()


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"max_pages": 0}, "max_pages"),
        ({"max_pages": True}, "max_pages"),
        ({"wait_until": "idle"}, "wait_until"),
        ({"wait_for": ""}, "wait_for"),
        ({"block_resource_types": ["images"]}, "images"),
        ({"block_resource_types": ["document"]}, "document"),
        ({"launch_timeout": 0}, "launch_timeout"),
    ],
)
def test_bad_options(kwargs: dict[str, object], word: str) -> None:
    with pytest.raises(ConfigurationError, match=word):
        BrowserOptions(**kwargs)  # type: ignore[arg-type]


async def test_refusals_before_any_browser_is_started() -> None:
    fetcher = BrowserFetcher(FetchLimits(), BrowserOptions(executable_path="/nonexistent/chromium"))
    with pytest.raises(AddressNotAllowedError) as info:
        await fetcher.fetch(Request("http://127.0.0.1:9/"))
    assert info.value.request is not None and info.value.url == "http://127.0.0.1:9/"
    with pytest.raises(AddressNotAllowedError):
        await fetcher.fetch(Request("http://[::1]:9/"))
    with pytest.raises(FetchError, match="GET only"):
        await fetcher.fetch(Request("http://127.0.0.1:9/", method="POST"))
    assert not fetcher.started
