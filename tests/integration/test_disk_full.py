"""The disk filling under ``crawlherd run`` on its embedded SQLite defaults (config DB, broker table and
frontier file side by side) -- on a small tmpfs the test mounts (skipped where mounting is not allowed).
While the file system is full the process must not die nor corrupt anything; it must say -- once,
naming the file -- that the disk is full and that the operator must free space; once space is freed it
carries on by itself, and every job succeeds once, every item stored once with its detail page.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from crawlherd.db import JobRun, StoredItem, create_engine, upgrade
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.processes import CliProcess, wait_until

pytestmark = [pytest.mark.slow]

KEYWORDS = [f"d{n}" for n in range(6)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of the test's own, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(disk)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the disk-full test needs one")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the file system is full; the file (delete it to free the space)."""
    filler = disk / "filler"
    try:
        f = filler.open("wb", buffering=0)  # unbuffered: closing it has nothing left to write (and fail)
    except OSError as exc:  # full already: shown if the test fails later
        print(f"the disk was full before the filler: {exc}; {[(p.name, p.stat().st_size) for p in disk.iterdir()]}")
        return filler
    with f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return filler


@pytest.mark.timeout(120)
async def test_the_disk_filling_under_crawlherd_run(small_disk: Path, board: Board, tmp_path: Path) -> None:  # noqa: F811
    board.slow = 0.3
    db = small_disk / "crawlherd.db"
    url = f"sqlite:///{db}"
    engine = create_engine(url)
    run = CliProcess(["run", "--database-url", url, "--allow-private", "--no-web", "--concurrency", "2",
                      "--interval", "0.2", "--backoff", "0.2"], tmp_path / "run.log")

    async def statuses() -> list[str]:
        async with engine.connect() as conn:
            return list((await conn.execute(select(JobRun.status))).scalars())

    try:
        await upgrade(engine)
        await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
        await engine.dispose()
        await run.start()

        async def started() -> bool:
            return bool(await statuses())

        await wait_until(started, alive=[run])
        await engine.dispose()
        filler = fill(small_disk)

        async def said_full() -> bool:
            return "disk is full" in run.log

        await wait_until(said_full, alive=[run], deadline=30)
        await asyncio.sleep(2.0)  # it goes on failing meanwhile: said once, and it stays up
        run.check_alive()
        filler.unlink(missing_ok=True)  # the operator frees space

        async def all_succeeded() -> bool:
            return sorted(await statuses()) == ["succeeded"] * len(KEYWORDS)

        await wait_until(all_succeeded, alive=[run], deadline=40)
        await run.stop()
        async with engine.connect() as conn:
            stored = [d if isinstance(d, dict) else json.loads(d)
                      for d in (await conn.execute(select(StoredItem.data))).scalars()]
    finally:
        if run.proc is not None:
            await run.stop()
        await engine.dispose()
    run.assert_clean()
    full = [line for line in run.log.splitlines() if "disk is full" in line]
    assert all(str(small_disk) in line for line in full), full
    warned = [line for line in full if " WARNING " in line]
    stores = [m[1] for m in (re.search(r": (config DB|frontier|broker) unavailable", line) for line in warned) if m]
    assert warned and len(stores) == len(warned) == len(set(stores)), warned  # once per store that met it
    assert all("the disk is full" in line and "free space on its file system" in line for line in warned), warned
    assert await asyncio.to_thread(_intact, small_disk) == []
    assert sorted(f.get("salary", "-") for f in stored) == sorted(
        f"salary of {k}-{n}" for k in KEYWORDS for n in range(3))


def _intact(disk: Path) -> list[str]:
    """The SQLite files on ``disk`` whose ``PRAGMA integrity_check`` is not ``ok``."""
    bad = []
    for path in disk.glob("*.db"):
        with contextlib.closing(sqlite3.connect(path)) as check:
            if check.execute("PRAGMA integrity_check").fetchone() != ("ok",):
                bad.append(str(path))
    return bad
