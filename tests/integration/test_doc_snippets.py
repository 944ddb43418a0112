"""Every fenced ``python`` and ``bash`` block of README.md and docs/ runs as written (issue 14).

A block whose info string says ``no-run: <reason>`` (```` ```python no-run: needs the internet ````) is
skipped with that reason. Python blocks run with top-level ``await`` in a fresh namespace; bash blocks
with ``set -e``; both in a scratch directory holding ``examples/`` and ``targets.toml`` (a copy of
``examples/targets.toml``), with ``crawlherd`` on the PATH and no CRAWLHERD_* variable of the caller.
Blocks that use Redis need the local Redis (skipped, or failed under CRAWLHERD_REQUIRE_SERVICES=1, when
it is missing).

The docs tell a reader to start the demo site (``python -m crawlherd.demo``, port 8080, or elsewhere with
``DEMO_URL``) before the blocks that crawl it; so does this test: a bash block that names ``DEMO_URL``,
``examples/`` or ``targets.toml`` runs with a demo site of its own (on a free port, so that tests running
at the same time do not collide) and ``DEMO_URL`` set to it -- as a reader whose port 8080 is taken does.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import forkpopen, forkserver

ROOT = Path(__file__).parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(python|bash)([^\n]*)\n(.*?)^```", re.M | re.S)

NEEDS_DEMO_SITE = ("DEMO_URL", "examples/", "targets.toml")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int
    lang: str
    info: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def snippets() -> list[Snippet]:
    found = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            found.append(Snippet(path, text[: m.start()].count("\n") + 1, m.group(1), m.group(2).strip(), m.group(3)))
    return found


def skip_reason(s: Snippet) -> str | None:
    if s.info.startswith("no-run"):
        return s.info.partition(":")[2].strip() or "marked no-run"
    return None


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(ROOT / "examples" / "targets.toml", tmp_path / "targets.toml")
    return tmp_path


@pytest.fixture(scope="module")
def demo_url() -> Iterator[str]:
    """``python -m crawlherd.demo`` on a free port, as the docs have the reader start it; its URL."""
    with forkpopen.popen(
        [sys.executable, "-m", "crawlherd.demo", "--port", "0", "--throttle-every", "0"],
        stdout=subprocess.PIPE, text=True, env=clean_env(),
    ) as proc:
        try:
            assert proc.stdout is not None
            proc.stdout.readline()  # "demo site on URL (...)"
            yield str(json.loads(proc.stdout.readline())["url"])
        finally:
            proc.terminate()  # by its PID; the with block closes the pipe and waits for it


def clean_env() -> dict[str, str]:
    """The caller's environment without CRAWLHERD_*, ``crawlherd`` first on the PATH: the installed
    console script, or -- with the fork server on -- the shim that runs it forked off the server
    (tests/support/_forkserver_shim.py; tests/integration/contrib/test_schedulers.py runs the real one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLHERD_")}
    first = [str(forkserver.shim_dir())] if forkserver.enabled() else []
    env["PATH"] = os.pathsep.join([*first, str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("snippet", snippets(), ids=lambda s: s.id)
def test_snippet_runs_as_written(snippet: Snippet, scratch: Path, request: pytest.FixtureRequest) -> None:
    reason = skip_reason(snippet)
    if reason is not None:
        pytest.skip(f"{snippet.id}: {reason}")
    if "redis://" in snippet.code:
        request.getfixturevalue("redis_url")
    if snippet.lang == "bash":
        env = clean_env()
        if any(word in snippet.code for word in NEEDS_DEMO_SITE):
            env["DEMO_URL"] = request.getfixturevalue("demo_url")
        proc = subprocess.run(
            ["bash", "-e", "-c", snippet.code], cwd=scratch, env=env, capture_output=True, text=True,
            timeout=110, check=False,
        )
        assert proc.returncode == 0, f"{snippet.id} failed:\n{proc.stdout}\n{proc.stderr}"
        return
    code = compile(snippet.code, snippet.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    cwd = os.getcwd()
    os.chdir(scratch)
    try:
        result = eval(code, {"__name__": "__snippet__"})  # noqa: S307 - our own documentation
        if asyncio.iscoroutine(result):
            asyncio.run(asyncio.wait_for(result, 100))
    finally:
        os.chdir(cwd)


def test_every_no_run_block_says_why() -> None:
    unexplained = [s.id for s in snippets() if s.info.startswith("no-run") and not s.info.partition(":")[2].strip()]
    assert unexplained == [], "write `no-run: <reason>` in these blocks' info strings"
