"""Every fenced ``python`` and ``bash`` block of README.md and docs/ runs as written (issue 14).

A block whose info string says ``no-run: <reason>`` (```` ```python no-run: needs the internet ````) is
skipped with that reason. Python blocks run with top-level ``await`` in a fresh namespace; bash blocks
with ``set -e``; both in a scratch directory holding ``examples/`` and ``targets.toml`` (a copy of
``examples/targets.toml``), with ``crawlherd`` on the PATH and no CRAWLHERD_* variable of the caller.
Blocks that use Redis need the local Redis (skipped, or failed under CRAWLHERD_REQUIRE_SERVICES=1, when
it is missing).
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(python|bash)([^\n]*)\n(.*?)^```", re.M | re.S)

#: README.md is not ours to edit in this change: its blocks that cannot run here, and why (to be
#: moved into their info strings).
README_NO_RUN = {
    "python3 -m venv": "installs the package",
    "from crawlherd import Crawler, RateLimiter": "needs the internet (example.com)",
    "crawlherd targets import examples/targets.toml": "`crawlherd run` runs until Ctrl+C (write `run --until-idle`)",
}


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
    if s.path.name == "README.md":
        for start, reason in README_NO_RUN.items():
            if s.code.startswith(start):
                return reason
    return None


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(ROOT / "examples" / "targets.toml", tmp_path / "targets.toml")
    return tmp_path


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLHERD_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.timeout(120)
@pytest.mark.parametrize("snippet", snippets(), ids=lambda s: s.id)
def test_snippet_runs_as_written(snippet: Snippet, scratch: Path, request: pytest.FixtureRequest) -> None:
    reason = skip_reason(snippet)
    if reason is not None:
        pytest.skip(f"{snippet.id}: {reason}")
    if "redis://" in snippet.code:
        request.getfixturevalue("redis_url")
    if snippet.lang == "bash":
        proc = subprocess.run(
            ["bash", "-e", "-c", snippet.code], cwd=scratch, env=clean_env(), capture_output=True, text=True,
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
