"""Real services restarted under a running ``crawlherd run``: the platform says so once, carries on,
loses nothing and logs no traceback.

Redis: a PRIVATE ``redis-server`` (AOF, ``appendfsync always``, the test's own port and directory) is
both the broker and the frontier; the test kills it by its PID while jobs are in flight and starts it
again on the same port and directory. Every target's job must end ``succeeded``, each target's search
page fetched at least once (a second fetch only where at-least-once allows it: a job in flight when the
broker died), and the log must hold one warning per outage, one "is back" line, and no traceback.
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import JobRun, create_engine, upgrade
from crawlherd.dispatch.targets import import_targets
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.forkserver import exec_crawlherd
from tests.support.private_redis import PrivateRedis
from tests.support.services import require_tool

pytestmark = [pytest.mark.slow, pytest.mark.redis]

KEYWORDS = [f"k{n}" for n in range(6)]
BAD_LOG = ("Traceback", "asynchronous generator is already running", "Unclosed", "unclosed", "Task exception")


async def statuses(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(JobRun.status))).scalars().all())


@pytest.mark.timeout(120)
async def test_redis_restarted_under_crawlherd_run(
    engine: AsyncEngine, board: Board, tmp_path: Path  # noqa: F811
) -> None:
    board.slow = 0.5
    board.hold = asyncio.Event()  # detail pages wait for it: set once Redis is back
    await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)

    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    server = PrivateRedis(redis_dir)
    server.start()
    redis = f"redis://127.0.0.1:{server.port}/0"
    log_path = tmp_path / "run.log"
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    with log_path.open("wb") as log_file:
        proc = await exec_crawlherd(
            "-v", "run", "--database-url", str(engine.url),
            "--broker-url", f"{redis}?prefix=b&claim_idle=5", "--frontier-url", f"{redis}?prefix=f&lease_timeout=5",
            "--allow-private", "--no-web", "--concurrency", "2", "--interval", "0.2", "--backoff", "0.2",
            stdout=log_file, stderr=asyncio.subprocess.STDOUT, env=env,
        )
        try:
            # Jobs in flight at the kill whatever the machine's speed: their detail pages are held until
            # Redis is back (waiting for " published " in the log once let every job finish first, on a
            # loaded machine). Read from the board, not the config DB: a read of the SQLite file could wait
            # behind the run's writes.
            while not any("/jobs/" in p for p in board.paths):
                assert proc.returncode is None, log_path.read_text()
                await asyncio.sleep(0.05)
            server.kill()  # SIGKILL by PID
            await asyncio.sleep(3.0)  # an outage of a few seconds
            server.start()  # same port, same directory: the AOF brings the streams back
            board.hold.set()
            while (await statuses(engine)).count("succeeded") < len(KEYWORDS):  # bounded by the timeout
                assert proc.returncode is None, log_path.read_text()
                await asyncio.sleep(0.1)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 60)
            server.kill()
    log = log_path.read_text()
    assert proc.returncode == 0, log
    for bad in BAD_LOG:
        assert bad not in log, log
    assert sorted(await statuses(engine)) == ["succeeded"] * len(KEYWORDS)
    fetched = board.fetched("/search")
    assert {p.split("q=")[1] for p in fetched} == set(KEYWORDS)
    # At least once, not more than that: a job in flight at the kill (two at concurrency 2) may have its
    # listing page fetched again twice -- once when the page's frontier lease (5 s) comes back while
    # its chain still waits, once by the job's retry -- and its run key keeps one success.
    assert len(fetched) <= len(KEYWORDS) + 2 * 2
    warnings = [line for line in log.splitlines() if "unavailable" in line and "WARNING" in line]
    assert 1 <= len(warnings) <= 3, log  # once per outage, per service (broker, frontier, relay)
    assert len({line.split(": ", 1)[1].split(" unavailable")[0] for line in warnings}) == len(warnings), log
    assert any(" is back after " in line for line in log.replace("\r", "\n").splitlines()), log


@pytest.mark.timeout(150)
async def test_postgres_restarted_under_crawlherd_run(
    board: Board, tmp_path: Path, redis_url: str, unique_name: str  # noqa: F811
) -> None:
    """The config DB (a private PostgreSQL cluster) killed by its PID while jobs are dispatched and
    crawled, started again a few seconds later: every job succeeds, once per target at the server
    (twice only for a job in flight at the kill), and the log holds no traceback."""
    from tests.support.private_postgres import PrivatePostgres
    from tests.support.real_brokers import remove

    board.slow = 0.5
    pg = PrivatePostgres()
    pg.start()
    engine = create_engine(pg.url)
    broker_url = f"{redis_url}?prefix={unique_name}&claim_idle=5"
    try:
        await upgrade(engine)
        await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
        log_path = tmp_path / "run.log"
        with log_path.open("wb") as log_file:
            proc = await exec_crawlherd(
                "-v", "run", "--database-url", pg.url, "--broker-url", broker_url,
                "--frontier-url", "memory://", "--allow-private", "--no-web", "--concurrency", "2", "--interval", "0.2",
                "--backoff", "0.2", stdout=log_file, stderr=asyncio.subprocess.STDOUT,
            )
            try:
                while not await statuses(engine):  # the first job has started
                    assert proc.returncode is None, log_path.read_text()
                    await asyncio.sleep(0.05)
                await engine.dispose()
                pg.kill()
                await asyncio.sleep(3.0)
                pg.start()
                while (await statuses(engine)).count("succeeded") < len(KEYWORDS):  # bounded by the timeout
                    assert proc.returncode is None, log_path.read_text()
                    await asyncio.sleep(0.2)
            finally:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    await asyncio.wait_for(proc.wait(), 60)
        log = log_path.read_text()
        assert proc.returncode == 0, log
        for bad in BAD_LOG:
            assert bad not in log, log
        assert sorted(await statuses(engine)) == ["succeeded"] * len(KEYWORDS)
        fetched = board.fetched("/search")
        assert {p.split("q=")[1] for p in fetched} == set(KEYWORDS)
        assert len(fetched) <= len(KEYWORDS) + 2
        # One process, one outage: said once, though its dispatcher and its worker both met it.
        assert log.count("config DB unavailable") == 1, log
        assert log.count("config DB is back") == 1, log
    finally:
        await engine.dispose()
        pg.stop()
        await remove(broker_url, "redis", unique_name)


@pytest.mark.rabbitmq
@pytest.mark.timeout(90)
async def test_rabbitmq_connection_closed_under_a_worker(
    engine: AsyncEngine, board: Board, tmp_path: Path, amqp_url: str, unique_name: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``rabbitmqctl close_connection`` on the worker's own connection (found by its client-provided
    name) while jobs are in flight: the worker reconnects and every job succeeds; a job whose delivery
    was lost with the channel is delivered again and skipped by its run key if it had finished."""
    import subprocess

    from crawlherd.brokers import open_broker
    from crawlherd.dispatch.dispatch_service import DispatchService
    from crawlherd.fetch.base import FetchLimits
    from crawlherd.worker.worker import Worker, WorkerOptions
    from tests.support.dispatch import dispatch_due, relay_all
    from tests.support.real_brokers import remove

    require_tool("rabbitmqctl", "to close the worker's RabbitMQ connection")
    board.slow = 0.5
    await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
    url = f"{amqp_url}?queue={unique_name}"
    try:
        async with open_broker(url) as broker:
            service = DispatchService(engine, broker)
            await dispatch_due(service)
            await relay_all(service)
            worker = Worker(
                engine,
                broker,
                WorkerOptions(concurrency=2, limits=FetchLimits(allow_private_addresses=True), backoff=0.2),
            )
            stop = asyncio.Event()
            async with worker:
                running = asyncio.create_task(worker.run(stop))
                while not await statuses(engine):  # noqa: ASYNC110 - DB state: no event to await
                    await asyncio.sleep(0.05)
                listing = (await asyncio.to_thread(
                    subprocess.run, ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
                    capture_output=True, text=True, timeout=30)).stdout
                ours = [line.split("\t")[0] for line in listing.splitlines()
                        if f"crawlherd broker {unique_name}" in line]
                assert len(ours) == 1, listing  # the test's own connection only
                await asyncio.to_thread(
                    subprocess.run, ["rabbitmqctl", "-q", "close_connection", ours[0], "test: connection killed"],
                    check=True, timeout=30, capture_output=True)
                while (await statuses(engine)).count("succeeded") < len(KEYWORDS):  # bounded by the timeout
                    assert not running.done(), running
                    await asyncio.sleep(0.1)
                stop.set()
                await running
    finally:
        await remove(url, "amqp", unique_name)
    assert sorted(await statuses(engine)) == ["succeeded"] * len(KEYWORDS)
    fetched = board.fetched("/search")
    assert {p.split("q=")[1] for p in fetched} == set(KEYWORDS)
    assert len(fetched) <= len(KEYWORDS) + 2  # only the jobs in flight at the close fetched again
    said = [r.getMessage() for r in caplog.records if r.name == "crawlherd.worker.worker"]
    assert len([m for m in said if "broker unavailable" in m]) == 1, said  # once per outage
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("crawlherd")], said  # no traceback


# -- the fleet: two dispatchers and two workers through a restart ----------------------------------------

FLEET_KEYWORDS = ["f0", "f1", "f2"]
EVERY = 3  # seconds between two slots of a target


@pytest.mark.postgres
@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["postgres", "redis", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)])
async def test_two_dispatchers_and_two_workers_carry_on_through_a_restart(
    fault: str, board: Board, tmp_path: Path, redis_url: str, amqp_url: str, unique_name: str  # noqa: F811
) -> None:
    """``crawlherd dispatch`` x2 and ``crawlherd worker`` x2 on a private PostgreSQL config DB, with
    targets falling due every 3 s (``misfire = "backfill"``). Mid-run, one service goes through a fault:
    the PostgreSQL cluster is killed by its PID and started again (``pg_ctl``, same data directory); or
    a private Redis (AOF), the broker and the frontier, is killed and started again; or every
    connection to RabbitMQ is cut (a TCP proxy of the test's own, between the processes and the shared
    server) and refused for a few seconds. Then: every slot due until after the fault has its job run
    to success (none skipped, none lost), only the jobs in flight at the fault fetched again, each at
    most twice more (at least once, the run key dropping the duplicate), every process stops cleanly
    with no traceback, and each says the outage at most once."""
    from tests._netutil import TcpProxy
    from tests.support.private_postgres import PrivatePostgres
    from tests.support.processes import CliProcess, outage_lines, wait_until
    from tests.support.real_brokers import remove

    pg = PrivatePostgres()
    await asyncio.to_thread(pg.start)
    engine = create_engine(pg.url)
    redis: PrivateRedis | None = None
    proxy: TcpProxy | None = None
    if fault == "redis":
        (tmp_path / "redis").mkdir()
        redis = PrivateRedis(tmp_path / "redis")
        await asyncio.to_thread(redis.start)
        broker_url = f"{redis.url}?prefix=b&claim_idle=5"
        frontier_url = f"{redis.url}?prefix=f&lease_timeout=5"
    elif fault == "rabbitmq":
        up = urlsplit(amqp_url)
        proxy = TcpProxy(up.hostname or "127.0.0.1", up.port or 5672)
        await proxy.up()
        broker_url = f"amqp://{up.username}:{up.password}@127.0.0.1:{proxy.port}/?queue={unique_name}"
        frontier_url = f"{redis_url}?prefix={unique_name}f&lease_timeout=5"
    else:
        broker_url = f"{redis_url}?prefix={unique_name}b&claim_idle=5"
        frontier_url = f"{redis_url}?prefix={unique_name}f&lease_timeout=5"
    common = ["--database-url", pg.url, "--broker-url", broker_url]
    procs = [CliProcess(["dispatch", "--interval", "0.2", *common], tmp_path / f"dispatch{n}.log") for n in (1, 2)]
    worker = ["worker", *common, "--frontier-url", frontier_url, "--allow-private", "--concurrency", "2"]
    procs += [CliProcess(worker, tmp_path / f"worker{n}.log") for n in (1, 2)]
    board.slow = 0.3
    try:
        await upgrade(engine)
        anchor = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=EVERY)  # the first slot, ahead
        document = {"websites": [website(board, robots="ignore")],
                    "targets": [{"website": "board", "keywords": FLEET_KEYWORDS, "every": f"{EVERY}s",
                                 "start_at": anchor.isoformat(), "misfire": "backfill", "backfill_limit": 1000,
                                 "misfire_grace": "1h"}]}
        (tmp_path / "targets.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
        await import_targets(engine, tmp_path / "targets.yaml")
        for proc in procs:
            await proc.start()

        async def succeeded(at_least: int) -> bool:
            return (await statuses(engine)).count("succeeded") >= at_least

        await wait_until(lambda: succeeded(2 * len(FLEET_KEYWORDS)), alive=procs)
        if fault == "postgres":
            await engine.dispose()
            await asyncio.to_thread(pg.kill)
            await asyncio.sleep(4)
            await asyncio.to_thread(pg.start)
        elif redis is not None:
            await asyncio.to_thread(redis.kill)
            await asyncio.sleep(4)
            await asyncio.to_thread(redis.start)  # same port and directory: the AOF brings everything back
        else:
            assert proxy is not None
            await proxy.down()
            await asyncio.sleep(4)
            await proxy.up()
        end = datetime.now(UTC) + timedelta(seconds=2 * EVERY)  # slots due after the fault too
        slots = [anchor + timedelta(seconds=EVERY * k) for k in range(int((end - anchor).total_seconds()) // EVERY + 1)]
        expected = len(slots) * len(FLEET_KEYWORDS)

        seen = -1

        async def all_due_done() -> bool:
            nonlocal seen
            async with engine.connect() as conn:
                done = (await conn.execute(select(func.count()).select_from(JobRun).where(
                    JobRun.slot_at <= slots[-1], JobRun.status == "succeeded"))).scalar_one()
            if done != seen:  # shown if the timeout strikes
                seen = int(done)
                print(f"{seen} of {expected} due jobs succeeded")
            return seen >= expected

        await wait_until(all_due_done, alive=procs, every=0.5, deadline=180)
        for proc in procs:
            await proc.stop()
        for proc in procs:
            proc.assert_clean()
            for service in ("config DB", "broker", "frontier"):
                lost, back = outage_lines(proc.log, service)
                assert len(lost) <= 1 and len(back) <= len(lost) + 1, (proc.args, service, proc.log)
        assert any(outage_lines(p.log, s)[0] for p in procs for s in ("config DB", "broker", "frontier")), \
            "no process noticed the fault"
        async with engine.connect() as conn:
            runs = (await conn.execute(select(JobRun.target_id, JobRun.slot_at, JobRun.status)
                                       .where(JobRun.slot_at <= slots[-1]))).all()
        per_target: dict[int, list[datetime]] = {}
        for run in runs:
            assert run.status == "succeeded", run
            per_target.setdefault(run.target_id, []).append(run.slot_at)
        for target, at in per_target.items():
            assert sorted(a.replace(tzinfo=UTC) if a.tzinfo is None else a for a in at) == slots, target
        assert len(per_target) == len(FLEET_KEYWORDS)  # every target, every slot, run once (the run key)
        # Fetched again: only the jobs held at the fault (2 workers x concurrency 2 = 4, the prefetch being
        # the concurrency), each at most twice more -- its holder retries the attempt the outage broke, and
        # the other worker may claim the delivery its holder could not touch during the outage (the run key
        # drops the duplicate writes).
        searches = len(board.fetched("/search"))
        assert searches <= len(statuses_all := await statuses(engine)) + 2 * 4, (searches, len(statuses_all))
    finally:
        for proc in procs:
            if proc.proc is not None:
                await proc.stop()
        await engine.dispose()
        await asyncio.to_thread(pg.stop)
        if redis is not None:
            await asyncio.to_thread(redis.kill)
        if proxy is not None:
            await proxy.down()
            await remove(f"{amqp_url}?queue={unique_name}", "amqp", unique_name)
        elif fault == "postgres":
            await remove(broker_url, "redis", f"{unique_name}b")
        if fault != "redis":
            await remove(frontier_url, "redis", f"{unique_name}f")


@pytest.mark.rabbitmq
@pytest.mark.timeout(120)
async def test_dispatch_and_worker_started_during_a_broker_outage_wait_for_it(
    engine: AsyncEngine, board: Board, tmp_path: Path, amqp_url: str, unique_name: str  # noqa: F811
) -> None:
    """``crawlherd dispatch`` and ``crawlherd worker`` started while RabbitMQ cannot be reached (a TCP
    proxy of the test's own, not listening) do not exit: each says the outage once, and once the
    broker answers the jobs are published and done."""
    from tests._netutil import TcpProxy
    from tests.support.processes import CliProcess, outage_lines, wait_until
    from tests.support.real_brokers import remove

    up = urlsplit(amqp_url)
    proxy = TcpProxy(up.hostname or "127.0.0.1", up.port or 5672)
    await proxy.up()
    await proxy.down()  # its port now refuses connections
    broker_url = f"amqp://{up.username}:{up.password}@127.0.0.1:{proxy.port}/?queue={unique_name}"
    await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
    common = ["--database-url", str(engine.url), "--broker-url", broker_url]
    procs = [CliProcess(["dispatch", "--interval", "0.2", *common], tmp_path / "dispatch.log"),
             CliProcess(["worker", *common, "--frontier-url", "memory://", "--allow-private"], tmp_path / "worker.log")]
    try:
        for proc in procs:
            await proc.start()

        async def both_said_so() -> bool:
            return all(outage_lines(p.log, "broker")[0] for p in procs)

        await wait_until(both_said_so, alive=procs)
        await proxy.up()

        async def done() -> bool:
            return await statuses(engine) == ["succeeded"] * len(KEYWORDS)

        await wait_until(done, alive=procs)
        for proc in procs:
            await proc.stop()
        for proc in procs:
            proc.assert_clean()
            lost, back = outage_lines(proc.log, "broker")
            assert len(lost) == 1 and len(back) == 1, proc.log
    finally:
        for proc in procs:
            if proc.proc is not None:
                await proc.stop()
        await proxy.down()
        await remove(f"{amqp_url}?queue={unique_name}", "amqp", unique_name)
