"""Dispatcher PROCESSES (the real ``crawlherd dispatch`` command) against one database.

Each test runs against the table-backed broker double (``tests/support/table_broker.py``, which
records every publish -- duplicates included -- as a committed row) and against the REAL brokers
(RabbitMQ, Redis Streams, SQLite) once they are integrated: then everything is drained from the broker
afterwards and every delivery counted.

- Must-show 1: three dispatcher processes, one PostgreSQL database, 500 targets, 50 consecutive slots:
  exactly one outbox row and one published job per (target, slot), none missing.
- Must-show 3: a dispatcher killed (SIGKILL) between publish and mark: the next dispatcher publishes
  the same message again, with the same idempotency key and job id.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import DispatchOutbox, create_engine, db_now
from crawlherd.messages import decode_job, idempotency_key
from tests.support import forkpopen
from tests.support.db import add_targets, add_website, database_now
from tests.support.real_brokers import drain, remove, scratch_url

ROOT = Path(__file__).resolve().parents[3]


BROKERS = ["table-double", "amqp", "redis", "sqlite"]


# Must-show 1 runs at full scale (500 targets x 50 slots: 25,000 jobs) against Redis Streams (not the
# table double too: that would double the suite's slowest test for nothing); against RabbitMQ and SQS (a
# standard queue, which does not deduplicate: a duplicate publish would show) the same three processes
# run at a smaller scale -- 25,000 persistent publishes with confirms cost RabbitMQ more CPU than any
# other test of the suite, and the local SQS server (moto) scans its whole queue on every receive.
SCALE_BROKERS = ["amqp", "redis", pytest.param("sqs", marks=pytest.mark.sqs)]
SCALE = {"amqp": (100, 20), "sqs": (20, 4)}  # broker -> (targets, slots); default (500, 50)


@pytest.fixture
def broker_url(request: pytest.FixtureRequest, unique_name: str, tmp_path: Path) -> Iterator[str | None]:
    """None for the table double; else a real broker URL on a scratch queue, removed afterwards."""
    kind = request.param
    if kind == "table-double":
        yield None
        return
    url = scratch_url(
        kind,
        unique_name,
        sqlite_path=str(tmp_path / "broker.db"),
        redis_url=request.getfixturevalue("redis_url") if kind == "redis" else "",
        amqp_url=request.getfixturevalue("amqp_url") if kind == "amqp" else "",
        sqs_endpoint=request.getfixturevalue("sqs_endpoint") if kind == "sqs" else "",
    )
    yield url
    asyncio.run(remove(url, kind, unique_name))


def start_dispatcher(
    db_url: str, *args: str, die_after_publish: bool = False, broker: str | None = None
) -> forkpopen.Process:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "CRAWLHERD_DATABASE_URL": db_url, "PYTHONPATH": path}
    env.pop("CRAWLHERD_BROKER_URL", None)
    if broker is None:
        broker = f"testdb+{db_url}"
        if die_after_publish:
            env["CRAWLHERD_TEST_DIE_AFTER_PUBLISH"] = "1"
    elif die_after_publish:
        broker = f"die+{broker}"
    return forkpopen.popen(  # forked off the fork server: the real CLI, without a fresh interpreter's imports
        [sys.executable, "-m", "tests.support.run_dispatch", "dispatch", "--broker-url", broker, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(procs: list[forkpopen.Process]) -> list[str]:
    """SIGTERM each (by its own PID) and collect the output; kill what does not stop in time."""
    outputs = []
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        outputs.append(out)
    return outputs


async def scalar(engine: AsyncEngine, sql: str, **params: object) -> object:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.xdist_group("rabbitmq-heavy")  # see tests/conftest.py
@pytest.mark.parametrize("broker_url", SCALE_BROKERS, indirect=True)
@pytest.mark.timeout(480)
async def test_three_dispatcher_processes_500_targets_50_slots(pg_database: str, broker_url: str | None) -> None:
    kind = broker_url.split(":", 1)[0] if broker_url else ""
    (n_targets, n_slots), every = SCALE.get(kind, (500, 50)), timedelta(milliseconds=250)
    engine = create_engine(pg_database)
    procs: list[forkpopen.Process] = []
    try:
        async with engine.begin() as conn:
            await conn.execute(text("TRUNCATE items, job_runs, dispatch_outbox, scrape_targets, websites CASCADE"))
            await conn.execute(text("DROP TABLE IF EXISTS test_publishes"))
        site = await add_website(engine)
        anchor = (await database_now(engine)) + timedelta(seconds=3)
        # Backfill with a big limit and a long grace: slots that fall behind a busy machine are late,
        # never lost, so "none missing" holds however slow the box is.
        ids = await add_targets(
            engine,
            site,
            n_targets,
            every=every,
            anchor=anchor,
            misfire="backfill",
            backfill_limit=10_000,
            grace=timedelta(hours=1),
        )
        procs = [start_dispatcher(pg_database, "--interval", "0.2", broker=broker_url) for _ in range(3)]
        end = anchor + n_slots * every  # slots anchor + k*every, k = 0..49
        expected = n_targets * n_slots
        deadline = time.monotonic() + 420  # a guard against a hang: a loaded machine took over 240 s
        published = 0
        while published < expected:
            assert all(p.poll() is None for p in procs), stop(procs)
            assert time.monotonic() < deadline, f"only {published} of {expected} published"
            await asyncio.sleep(1)
            published = int(
                await scalar(  # type: ignore[call-overload]
                    engine,
                    "SELECT count(*) FROM dispatch_outbox WHERE slot_at < :end AND status = 'published'",
                    end=end,
                )
            )
        outputs = stop(procs)
        assert [p.returncode for p in procs] == [0, 0, 0], outputs
        assert all("dispatcher stopped" in out for out in outputs), outputs

        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(DispatchOutbox.target_id, DispatchOutbox.slot_at, DispatchOutbox.key, DispatchOutbox.status)
                )
            ).all()
            if broker_url is None:
                publishes = (await conn.execute(text("SELECT key, pid FROM test_publishes"))).all()
        if broker_url is not None:  # count what the real broker holds
            publishes = [(d.key, None) for d in await drain(broker_url, expect_keys=expected)]
        window = [r for r in rows if r.slot_at < end]
        # Exactly one outbox row per (target, slot) of the 50, each of the 50 slots present.
        per_target: dict[int, list[object]] = {}
        for r in window:
            per_target.setdefault(r.target_id, []).append(r.slot_at)
        assert sorted(per_target) == sorted(ids)
        grid = [anchor + k * every for k in range(n_slots)]
        for tid, slots in per_target.items():
            assert sorted(slots) == grid, f"target {tid}"  # type: ignore[type-var]
        # Exactly one published job per (target, slot): no duplicate publish, none missing.
        counts = Counter(key for key, _ in publishes)
        window_keys = {r.key for r in window}
        assert window_keys == {idempotency_key(r.target_id, r.slot_at) for r in window}
        assert {k: counts[k] for k in window_keys} == dict.fromkeys(window_keys, 1)
        assert max(counts.values()) == 1  # not even outside the window
        assert set(counts) == {r.key for r in rows if r.status == "published"}
        # The three processes shared the work.
        if broker_url is None:
            by_pid = Counter(pid for _, pid in publishes)
            print(f"publishes per dispatcher process: {dict(by_pid)}")
            assert len(by_pid) >= 2
    finally:
        stop(procs)
        await engine.dispose()


async def test_killed_between_publish_and_mark_republishes_with_the_same_key(db_url: str) -> None:
    await killed_between_publish_and_mark(db_url, None)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("broker_url", BROKERS[1:], indirect=True)
async def test_killed_between_publish_and_mark_real_broker(pg_database: str, broker_url: str) -> None:
    engine = create_engine(pg_database)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("TRUNCATE items, job_runs, dispatch_outbox, scrape_targets, websites CASCADE"))
    finally:
        await engine.dispose()
    await killed_between_publish_and_mark(pg_database, broker_url)


async def killed_between_publish_and_mark(db_url: str, broker_url: str | None) -> None:
    engine = create_engine(db_url)
    try:
        site = await add_website(engine)
        now = await database_now(engine)
        (tid,) = await add_targets(engine, site, 1, every=timedelta(hours=1), anchor=now - timedelta(seconds=10))

        crashed = start_dispatcher(db_url, "--once", "--lease", "1", die_after_publish=True, broker=broker_url)
        out, _ = crashed.communicate(timeout=120)
        assert crashed.returncode == -signal.SIGKILL, out
        async with engine.connect() as conn:
            (row,) = (await conn.execute(select(DispatchOutbox.__table__))).all()
        assert row.status == "pending" and row.lease_owner is not None  # published, never marked

        # Wait (on the database clock) for the dead dispatcher's lease to run out.
        for _ in range(200):
            async with engine.connect() as conn:
                if await db_now(conn) >= row.leased_until:
                    break
            await asyncio.sleep(0.05)
        second = start_dispatcher(db_url, "--once", broker=broker_url)
        out, _ = second.communicate(timeout=120)
        assert second.returncode == 0, out

        async with engine.connect() as conn:
            if broker_url is None:
                publishes = (await conn.execute(text("SELECT key, body FROM test_publishes ORDER BY id"))).all()
            else:
                publishes = [(d.key, d.body) for d in await drain(broker_url, expect=2)]
            status = (await conn.execute(select(DispatchOutbox.status))).scalar_one()
            total = (await conn.execute(select(func.count()).select_from(DispatchOutbox))).scalar_one()
        assert len(publishes) == 2 and status == "published" and total == 1
        (k1, b1), (k2, b2) = publishes
        assert k1 == k2 == idempotency_key(tid, row.slot_at)
        m1, m2 = decode_job(b1), decode_job(b2)
        assert m1.idempotency_key == m2.idempotency_key == k1 and m1.job_id == m2.job_id
        assert json.loads(b1) == json.loads(b2)
    finally:
        await engine.dispose()
