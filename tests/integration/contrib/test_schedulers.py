"""The cron line and the systemd units of docs/integrations.md, as written there: the units pass
``systemd-analyze verify`` (skipped, loudly, where systemd is missing), and the cron line's schedule
parses and its command runs one dispatch cycle. The install path ``/opt/crawlherd/.venv/bin/crawlherd``
and the hosts in the settings are the parts a user adapts: the tests put this checkout's in their place.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from croniter import croniter
from sqlalchemy import select

from crawlherd.brokers import open_broker
from crawlherd.db import DispatchOutbox, create_engine, upgrade
from tests.support.db import add_targets, add_website, database_now
from tests.support.docblocks import doc_block
from tests.support.services import MISSING

DOC_BIN = "/opt/crawlherd/.venv/bin/crawlherd"
CRAWLHERD = str(Path(sys.executable).with_name("crawlherd"))


def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip(f"{MISSING}systemd-analyze is not installed: the units in docs/integrations.md were not verified")
    service, timer = tmp_path / "crawlherd-dispatch.service", tmp_path / "crawlherd-dispatch.timer"
    service_text = doc_block("crawlherd-dispatch.service")
    assert DOC_BIN in service_text
    service.write_text(service_text.replace(DOC_BIN, CRAWLHERD))
    timer.write_text(doc_block("crawlherd-dispatch.timer"))
    run = subprocess.run([analyze, "verify", str(service), str(timer)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "crawlherd-dispatch" not in run.stderr, run.stderr  # no warning about our units either


def test_cron_line_runs_one_dispatch_cycle(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    entries = []
    for line in doc_block("cron").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if eq and " " not in name:
            env[name] = value
        else:
            entries.append(line)
    assert set(env) == {"CRAWLHERD_DATABASE_URL", "CRAWLHERD_BROKER_URL"}
    (entry,) = entries
    fields = entry.split(None, 5)
    assert croniter.is_valid(" ".join(fields[:5])), entry
    command = shlex.split(fields[5])
    assert command[0] == DOC_BIN
    db_url, broker_url = f"sqlite:///{tmp_path / 'config.db'}", f"sqlite:///{tmp_path / 'broker.db'}"
    ids = asyncio.run(_due_targets(db_url))
    run = subprocess.run([CRAWLHERD, *command[1:]], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "CRAWLHERD_DATABASE_URL": db_url, "CRAWLHERD_BROKER_URL": broker_url})
    assert run.returncode == 0, run.stdout + run.stderr
    assert asyncio.run(_published(db_url, broker_url)) == (sorted(ids), 2)


async def _due_targets(db_url: str) -> list[int]:
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        site = await add_website(engine)
        now = await database_now(engine)
        return await add_targets(engine, site, 2, every=timedelta(hours=1), anchor=now - timedelta(seconds=5))
    finally:
        await engine.dispose()


async def _published(db_url: str, broker_url: str) -> tuple[list[int], int]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(DispatchOutbox.target_id, DispatchOutbox.status))).all()
        assert {r.status for r in rows} == {"published"}
        async with open_broker(broker_url) as broker:
            return sorted(r.target_id for r in rows), await broker.pending()
    finally:
        await engine.dispose()
