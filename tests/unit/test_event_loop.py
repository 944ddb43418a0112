"""The event loop of the long-running commands: uvloop when installed, asyncio otherwise, or as chosen."""

from __future__ import annotations

import asyncio
import sys

import click
import pytest

from crawlherd.cli._loop import run_async


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
