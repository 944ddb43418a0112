"""crawlherd.contrib.celery with a real Celery beat and a real Celery worker on the local RabbitMQ and
PostgreSQL: beat sends ``crawlherd.dispatch`` every second, the cycle publishes each due (target, slot)
as a ``crawlherd.run_job`` Celery task (broker ``celery+amqp://``), the worker runs it and stores items.
Exactly once per slot: one run per outbox row, and each job's task received once by the worker.

The Celery app is the block of docs/integrations.md, plus the test's own queue and a 1 s beat.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp import web
from sqlalchemy import select

from crawlherd.db import DispatchOutbox, JobRun, StoredItem, create_engine, upgrade
from tests.support.db import add_targets, add_website, database_now
from tests.support.docblocks import doc_block
from tests.support.httpserver import serve

pytest.importorskip("celery")
pytestmark = [pytest.mark.postgres, pytest.mark.rabbitmq, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]

TEST_ADDITIONS = """
import os
from crawlherd.contrib.celery import beat_schedule as _beat_schedule
app.conf.beat_schedule = _beat_schedule(every=1.0)
app.conf.task_default_queue = os.environ["TEST_QUEUE"]
app.conf.worker_enable_remote_control = False
app.conf.worker_hijack_root_logger = True
"""


async def _listing(request: web.Request) -> web.Response:
    q = request.query.get("q", "")
    cards = "".join(f'<article><h2>{q} job {i}</h2><a href="/job/{q.replace(" ", "-")}-{i}">more</a></article>'
                    for i in range(2))
    return web.Response(text=f"<html><body>{cards}</body></html>", content_type="text/html")


@pytest.fixture
async def site() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/search", _listing)
    async with serve(app) as served:
        yield served.url


@pytest.fixture
def pg_db(postgres_db_url: str) -> str:
    return postgres_db_url


def _celery(home: Path, env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "celery", "-A", "proj", *args], cwd=home, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _delete_queue(amqp_url: str, name: str) -> None:
    import aio_pika

    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(name)


async def test_celery_beat_and_worker_targets_to_items_once_per_slot(
    pg_db: str, amqp_url: str, site: str, tmp_path: Path, unique_name: str
) -> None:
    from crawlherd.contrib.celery import job_task_id

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / "celery.py").write_text(doc_block("celery-app") + TEST_ADDITIONS)
    db_url = pg_db
    engine = create_engine(db_url)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        await upgrade(engine)
        website = await add_website(
            engine, name="celery-site", base_url=site, search_url_template=f"{site}/search?q={{keywords}}",
            pagination={"type": "none"}, politeness={"robots": "ignore", "min_delay": 0.0},
            extraction={"item_selector": "article", "item_url": "a@href", "fields": {"title": "h2"}})
        now = await database_now(engine)
        ids = await add_targets(engine, website, 2, every=timedelta(seconds=1), anchor=now + timedelta(seconds=1))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src"), str(ROOT)]),
               "CRAWLHERD_DATABASE_URL": db_url, "CRAWLHERD_ALLOW_PRIVATE_ADDRESSES": "true",
               "CRAWLHERD_BROKER_URL": f"celery+amqp://guest:guest@127.0.0.1:5672//?queue={unique_name}",
               "TEST_QUEUE": unique_name}
        worker_log, beat_log = tmp_path / "worker.log", tmp_path / "beat.log"
        procs.append(_celery(tmp_path, env, "worker", "--pool=solo", "-Q", unique_name, "--without-gossip",
                             "--without-mingle", "--without-heartbeat", "--loglevel=INFO",
                             "-n", f"{unique_name}@%h", log=worker_log))
        procs.append(_celery(tmp_path, env, "beat", "-s", str(tmp_path / "beat-schedule"), "--loglevel=INFO",
                             log=beat_log))

        async def runs() -> list[JobRun]:
            async with engine.connect() as conn:
                return list((await conn.execute(select(JobRun.__table__))).all())  # type: ignore[arg-type]

        deadline = time.monotonic() + 180  # a guard against a hang: a loaded machine took over 90 s
        def cycles() -> int:
            return len(re.findall(r"Task crawlherd\.dispatch\[[0-9a-f-]+\] received", worker_log.read_text()))

        # until every target ran for two slots or more (the count starts at 1), and beat sent two cycles or more
        while not all(n >= 3 for n in Counter(
                [*ids, *(r.target_id for r in await runs() if r.status == "succeeded")]).values()) or cycles() < 2:
            assert all(p.poll() is None for p in procs), worker_log.read_text()[-3000:]
            assert time.monotonic() < deadline, (worker_log.read_text()[-3000:], beat_log.read_text()[-2000:])
            await asyncio.sleep(0.2)
        _stop(procs[1])  # beat: no more cycles
        # let the worker finish every job that was published
        while True:
            async with engine.connect() as conn:
                published = (await conn.execute(select(DispatchOutbox.target_id, DispatchOutbox.slot_at,
                                                       DispatchOutbox.key, DispatchOutbox.status))).all()
            done = {(r.target_id, r.slot_at) for r in await runs() if r.status == "succeeded"}
            if {(r.target_id, r.slot_at) for r in published} <= done:
                break
            assert time.monotonic() < deadline, worker_log.read_text()[-3000:]
            await asyncio.sleep(0.2)
        _stop(procs[0])

        all_runs = await runs()
        assert {r.status for r in published} == {"published"}
        assert sorted((r.target_id, r.slot_at) for r in all_runs) == sorted(
            (r.target_id, r.slot_at) for r in published)
        assert {r.status for r in all_runs} == {"succeeded"}
        assert all(v >= 2 for v in Counter(r.target_id for r in all_runs).values())
        # each job's task was received by the worker exactly once (no duplicate publish, no redelivery)
        log = worker_log.read_text()
        received = Counter(re.findall(r"Task crawlherd\.run_job\[([0-9a-f-]+)\] received", log))
        assert received == Counter({job_task_id(r.key): 1 for r in published}), log[-3000:]
        async with engine.connect() as conn:
            items = (await conn.execute(select(StoredItem.target_id, StoredItem.url))).all()
        assert sorted({i.target_id for i in items}) == sorted(ids)
        assert len(items) == 2 * len(ids)
    finally:
        for proc in procs:
            _stop(proc)
        await engine.dispose()
        await _delete_queue(amqp_url, unique_name)
