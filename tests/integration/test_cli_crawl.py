"""``crawlherd crawl`` as a user runs it: a real process against the local server."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from crawlherd.cli import main
from tests.servers.misbehaving import MisbehavingServer
from tests.support.forkserver import exec_crawlherd, exec_python


@pytest.fixture
async def server() -> AsyncIterator[MisbehavingServer]:
    async with MisbehavingServer(pages=40) as s:
        yield s


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await exec_crawlherd(
        "crawl", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_crawl_writes_jsonl_and_a_summary(server: MisbehavingServer, tmp_path: Path) -> None:
    out = tmp_path / "pages.jsonl"
    code, _, err = await run_cli(
        server.url + "/page/1", "--allow-private", "--delay", "0", "--max-pages", "12", "--depth", "9",
        "--output", str(out),
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and all(r["success"] and r["status_code"] == 200 for r in rows)
    assert len({r["url"] for r in rows}) == 12
    assert "crawled 12 page(s): 12 ok, 0 failed" in err and "200: 12" in err


async def test_partial_failure_still_exits_zero(server: MisbehavingServer) -> None:
    code, _, err = await run_cli(server.url + "/page/1", server.url + "/always/500", "--allow-private", "--depth", "0")
    assert code == 0, err
    assert "1 ok, 1 failed" in err and "500: 1" in err


async def test_nothing_crawled_exits_non_zero_and_says_why(server: MisbehavingServer) -> None:
    code, _, err = await run_cli(server.url + "/page/1", "--depth", "0")  # loopback without --allow-private
    assert code == 1
    assert "AddressNotAllowedError: 1" in err and "nothing could be crawled" in err


def test_help_teaches() -> None:
    result = CliRunner().invoke(main, ["crawl", "--help"])
    assert result.exit_code == 0
    for text in ("--max-pages", "--depth", "--concurrency", "--delay", "--respect-robots", "--allow-private",
                 "--output", "Examples:", "Exit status", "Retry-After"):
        assert text in result.output


def test_bad_option_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["crawl", "http://example.com", "--max-pages", "0"])
    assert result.exit_code == 2 and "max-pages" in result.output


async def _crawl_loop_line(server: MisbehavingServer, *args: str, hide_uvloop: bool = False) -> tuple[int, str]:
    """Run ``crawlherd -v crawl`` in a process (uvloop made unimportable when asked); the exit code
    and the line that names the event loop."""
    hide = "import sys; sys.modules['uvloop'] = None; " if hide_uvloop else ""
    proc = await exec_python(  # forked off the fork server, where uvloop was imported: hidden all the same
        sys.executable, "-c", f"{hide}from crawlherd.cli import main; main()", "-v", "crawl",
        server.url + "/page/1", "--allow-private", "--depth", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = [line for line in err.decode().splitlines() if "event loop:" in line or "uvloop" in line]
    assert proc.returncode is not None
    return proc.returncode, "\n".join(lines)


async def test_crawl_runs_on_uvloop_when_installed(server: MisbehavingServer) -> None:
    pytest.importorskip("uvloop")
    code, line = await _crawl_loop_line(server)
    assert code == 0 and "event loop: uvloop" in line


async def test_crawl_falls_back_to_asyncio_without_uvloop(server: MisbehavingServer) -> None:
    code, line = await _crawl_loop_line(server, hide_uvloop=True)
    assert code == 0 and "event loop: asyncio" in line
    code, line = await _crawl_loop_line(server, "--loop", "uvloop", hide_uvloop=True)
    assert code == 1 and "uvloop is not installed" in line


async def test_crawl_loop_flag_chooses_asyncio(server: MisbehavingServer) -> None:
    code, line = await _crawl_loop_line(server, "--loop", "asyncio")
    assert code == 0 and "event loop: asyncio" in line
