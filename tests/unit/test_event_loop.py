"""The event loop of the long-running commands: uvloop when installed, asyncio otherwise, or as chosen."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator

import click
import pytest

from crawlherd.cli import _loop
from crawlherd.cli._loop import GC_THRESHOLDS, run_async


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_runs_on_uvloop_when_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert run_async(_loop_module(), "auto").startswith("uvloop")


def test_asyncio_is_asyncio_even_with_uvloop_installed() -> None:
    assert run_async(_loop_module(), "asyncio").startswith("asyncio")


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` now raises ImportError
    assert run_async(_loop_module(), "auto").startswith("asyncio")


def test_uvloop_asked_for_but_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    coro = _loop_module()
    with pytest.raises(click.ClickException, match=r"uvloop is not installed \(pip install 'crawlherd\[uvloop\]'\)"):
        run_async(coro, "uvloop")
    assert coro.cr_frame is None  # closed, not left un-awaited


@pytest.mark.parametrize("command", ["crawl", "worker", "run", "dispatch"])
def test_every_long_running_command_has_the_loop_flag(command: str) -> None:
    from click.testing import CliRunner

    from crawlherd.cli import main

    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "--loop [auto|uvloop|asyncio]" in result.output


def test_the_event_loop_setting_comes_from_the_environment() -> None:
    from crawlherd.settings import load_settings

    assert load_settings(None, env={"CRAWLHERD_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"
    assert load_settings(None, env={}).event_loop == "auto"


async def _collector() -> tuple[tuple[int, ...], int]:
    return gc.get_threshold(), gc.get_freeze_count()


@pytest.fixture
def python_gc() -> Iterator[None]:
    """The test process's collector as it was, afterwards (a test here tunes it)."""
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("python_gc")
def test_a_process_of_its_own_tunes_its_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRAWLHERD_GC", raising=False)
    monkeypatch.setattr(_loop, "_owned", False)
    before = gc.get_threshold()
    # in another program's process (CliRunner, an embedding): its collector is left alone
    assert run_async(_collector(), "asyncio") == (before, gc.get_freeze_count())
    _loop.own_the_process()
    thresholds, frozen = run_async(_collector(), "asyncio")
    assert thresholds == GC_THRESHOLDS != before
    assert frozen > 1000  # start-up's objects: out of the collector's sight


@pytest.mark.usefixtures("python_gc")
def test_crawlherd_gc_default_keeps_pythons_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLHERD_GC", "default")
    monkeypatch.setattr(_loop, "_owned", True)
    before = gc.get_threshold()
    assert run_async(_collector(), "asyncio") == (before, gc.get_freeze_count())
