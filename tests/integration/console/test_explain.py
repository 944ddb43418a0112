"""Every answer to "why didn't target X run?", each produced by a real scenario (the real tick, relay,
run store, heartbeats and run-now on one SQLite config DB), and given alike by the function, by
`crawlherd explain --json` and by the target's page."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from crawlherd import DemoSite
from crawlherd.brokers import open_broker
from crawlherd.brokers.memory import MemoryBroker
from crawlherd.cli import main
from crawlherd.console.dead_letters import retry_dead
from crawlherd.console.editing import set_target_active
from crawlherd.console.explain import VERDICTS, Explanation, explain
from crawlherd.console.run_now import run_now
from crawlherd.db import create_engine, upgrade
from crawlherd.db.engine import db_now
from crawlherd.db.heartbeat import Heartbeat
from crawlherd.db.models import DispatchOutbox, ProcessHeartbeat, ScrapeTarget
from crawlherd.dispatch.embedded import run_embedded
from crawlherd.dispatch.outbox import tick
from crawlherd.dispatch.relay import Relay, RelayOptions
from crawlherd.fetch.base import FetchLimits
from crawlherd.messages import decode_job
from crawlherd.web.app import create_app
from crawlherd.worker.runs import RunStore
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.support.console import add_site, add_target

# scenario (target keywords) -> the verdict it must get, and a phrase its explanation must contain
EXPECTED = {
    "inactive": ("inactive", "disabled"),
    "not_due": ("not_due", "next run is at"),
    "skipped_by_misfire": ("skipped_by_misfire", "misfire policy 'skip'"),
    "not_claimed": ("not_claimed", "no dispatcher is alive"),
    "stuck_in_outbox": ("stuck_in_outbox", "is down (set_down)"),
    "waiting_for_worker": ("waiting_for_worker", "not taken by a worker yet; 1 worker(s) alive"),
    "running": ("running", "w-alive"),
    "worker_lost": ("worker_lost", "stopped beating"),
    "retrying": ("retrying", "HTTP 503"),
    "dead": ("dead", "HTTP 500 every time"),
    "requeued": ("requeued", "sent again"),
    "ran": ("ran", "succeeded"),
}


async def _scenarios(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        await add_site(engine, "site", "https://jobs.example.com")
        ids = {name: await add_target(engine, "site", name, every="1h") for name in EXPECTED}
        async with engine.begin() as conn:
            now = await db_now(conn)
        hour_ago = now - timedelta(hours=1)

        await set_target_active(engine, ids["inactive"], False, actor="test")

        # The dispatcher was down over a slot 10 minutes ago; the tick that comes back skips it.
        for name in ("skipped_by_misfire", "not_claimed"):
            async with engine.begin() as conn:
                await conn.execute(
                    update(ScrapeTarget)
                    .where(ScrapeTarget.id == ids[name])
                    .values(
                        anchor_at=now - timedelta(minutes=10),
                        next_run_at=now - timedelta(minutes=10),
                        created_at=now - timedelta(days=1),
                    )
                )
            if name == "skipped_by_misfire":
                assert (await tick(engine, batch_size=100, max_slots_per_target=10)).inserted == 0

        # Run now -> outbox; the broker is down for the first, up for the rest.
        down, up = MemoryBroker(), MemoryBroker()
        down.set_down(True)
        await run_now(engine, ids["stuck_in_outbox"], requested_by="test")
        assert (await Relay(engine, down, RelayOptions(backoff=600)).run_round()).failed == 1
        for name in ("waiting_for_worker", "running", "worker_lost", "retrying", "dead", "requeued", "ran"):
            await run_now(engine, ids[name], requested_by="test")
        assert (await Relay(engine, up).run_round()).published == 7

        async with engine.connect() as conn:
            bodies = dict((await conn.execute(select(DispatchOutbox.target_id, DispatchOutbox.body))).all())
        store = RunStore(engine)

        def job(name: str):  # noqa: ANN202
            return decode_job(bodies[ids[name]].encode())

        alive = Heartbeat(engine, kind="worker", name="w-alive", interval=3600)
        await alive.register()
        lost = Heartbeat(engine, kind="worker", name="w-lost", interval=10)
        await lost.register()
        async with engine.begin() as conn:  # w-lost's last beat was an hour ago
            await conn.execute(
                update(ProcessHeartbeat).where(ProcessHeartbeat.id == "w-lost").values(last_seen=hour_ago)
            )
        await store.start(job("running"), worker="w-alive")
        await store.start(job("worker_lost"), worker="w-lost")
        await store.start(job("retrying"), worker="w-alive")
        await store.finish(job("retrying"), status="failed", error="HTTP 503 from the site")
        for name in ("dead", "requeued"):
            await store.start(job(name), worker="w-alive")
            await store.finish(job(name), status="dead", error="HTTP 500 every time")
        dead_run = (await store.dead())[-1].id
        assert await retry_dead(engine, [dead_run], actor="test") == 1
        await store.start(job("ran"), worker="w-alive")
        await store.finish(job("ran"), status="succeeded", pages=2, items_new=5)
        return ids
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, int]]:
    path: Path = tmp_path_factory.mktemp("explain") / "config.db"
    url = f"sqlite:///{path}"
    asyncio.run(upgrade(url))
    return url, asyncio.run(_scenarios(url))


def test_every_verdict_has_a_scenario() -> None:
    # "politeness" needs a real worker and frontier: test_politeness_holds_the_pages_of_a_running_job;
    # "in_outbox" a dispatcher alive (which "not_claimed" must not have): test_operator_view.py
    assert set(VERDICTS) == {v for v, _ in EXPECTED.values()} | {"politeness", "in_outbox"}


async def test_the_function_answers(scenario: tuple[str, dict[str, int]]) -> None:
    url, ids = scenario
    engine = create_engine(url)
    try:
        for name, (verdict, phrase) in EXPECTED.items():
            why = await explain(engine, ids[name])
            assert (why.verdict, phrase in why.summary) == (verdict, True), (name, why.summary)
    finally:
        await engine.dispose()


def test_the_cli_answers(scenario: tuple[str, dict[str, int]]) -> None:
    url, ids = scenario
    for name, (verdict, phrase) in EXPECTED.items():
        result = CliRunner().invoke(main, ["explain", str(ids[name]), "--json", "--database-url", url])
        assert result.exit_code == 0, result.output
        answer = json.loads(result.output)
        assert (answer["verdict"], phrase in answer["summary"]) == (verdict, True), (name, answer)
    text = CliRunner().invoke(main, ["explain", str(ids["ran"]), "--database-url", url]).output
    assert "ran" in text and "claimed" in text and "w-alive" in text


async def test_the_page_answers(scenario: tuple[str, dict[str, int]]) -> None:
    import html
    import re

    import httpx

    url, ids = scenario
    engine = create_engine(url)
    try:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            for name, (verdict, phrase) in EXPECTED.items():
                page = (await client.get(f"/targets/{ids[name]}")).text
                found = re.search(r'data-verdict="([a-z_]+)"', page)
                assert found and found.group(1) == verdict, name
                assert phrase in html.unescape(page), name
            lineage = (await client.get(f"/targets/{ids['ran']}")).text
            assert "run now by test" in lineage and "MemoryBroker" in lineage and "w-alive" in lineage
    finally:
        await engine.dispose()


async def test_at_a_past_time(scenario: tuple[str, dict[str, int]]) -> None:
    url, ids = scenario
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            now = await db_now(conn)
        earlier = await explain(engine, ids["ran"], now - timedelta(days=30))
        assert earlier.verdict == "not_due"
    finally:
        await engine.dispose()


async def _verdicts(engine: Any, ids: dict[str, int]) -> dict[str, Explanation]:
    return {name: await explain(engine, tid) for name, tid in ids.items()}


async def test_politeness_holds_the_pages_of_a_running_job(tmp_path: Path) -> None:
    """A real pipeline (tick, relay, broker, worker and its frontier against two demo sites): one site
    answers 429 with Retry-After 50 (the frontier backs its host off), the other asks min_delay 3600 s
    of two targets (the second waits). Each job runs, and the function, `crawlherd explain` and the
    page say its pages are held by the website's politeness -- the back-off, the delay."""
    import html
    import re

    import httpx

    url = f"sqlite:///{tmp_path}/config.db"
    await upgrade(url)
    engine = create_engine(url)
    try:
        async with (
            DemoSite(seed=3, throttle_every=1, retry_after=50) as throttled,
            DemoSite(seed=4, throttle_every=0) as slow,
        ):
            await add_site(engine, "throttled", throttled.url)
            await add_site(
                engine, "slow", slow.url, politeness={"min_delay": 3600, "max_concurrency": 4, "robots": "ignore"}
            )
            ids = {
                "backoff": await add_target(engine, "throttled", "python", "berlin"),
                "slow-1": await add_target(engine, "slow", "python", "berlin"),
                "slow-2": await add_target(engine, "slow", "rust", "berlin"),
            }
            for tid in ids.values():
                await run_now(engine, tid, requested_by="test")
            stop = asyncio.Event()
            async with open_broker(url) as broker:
                worker = Worker(
                    engine,
                    broker,
                    WorkerOptions(limits=FetchLimits(allow_private_addresses=True), shutdown_timeout=0.5),
                )
                async with worker:
                    pipeline = asyncio.create_task(run_embedded(engine, broker, worker, stop=stop, interval=0.05))
                    try:
                        # until the worker's heartbeat (every 10 s) has shown both holds
                        while True:
                            why = await _verdicts(engine, ids)
                            held = {n for n, w in why.items() if w.verdict == "politeness"}
                            if "backoff" in held and held & {"slow-1", "slow-2"}:
                                break
                            assert not pipeline.done(), pipeline
                            await asyncio.sleep(0.3)
                        delayed = next(n for n in ("slow-1", "slow-2") if n in held)
                        phrases = {"backoff": "backs off for", delayed: "for its delay of 3600s"}
                        for name, phrase in phrases.items():
                            assert phrase in why[name].summary, why[name].summary
                            assert "held by the website's politeness" in why[name].summary

                        def cli(tid: int) -> Any:
                            return CliRunner().invoke(main, ["explain", str(tid), "--json", "--database-url", url])

                        transport = httpx.ASGITransport(app=create_app(engine))
                        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                            for name, phrase in phrases.items():
                                result = await asyncio.to_thread(cli, ids[name])
                                assert result.exit_code == 0, result.output
                                answer = json.loads(result.output)
                                assert (answer["verdict"], phrase in answer["summary"]) == ("politeness", True)
                                page = (await client.get(f"/targets/{ids[name]}")).text
                                found = re.search(r'data-verdict="([a-z_]+)"', page)
                                assert found and found.group(1) == "politeness", name
                                assert phrase in html.unescape(page), name
                            frontier = html.unescape((await client.get("/frontier")).text)
                            rows = {
                                m.group(1): m.group(2)
                                for m in re.finditer(r'<td class="mono">([^<]+)</td>(.*?)</tr>', frontier, re.S)
                            }
                            throttled_row = rows[throttled.url.split("//")[1].rstrip("/")]
                            slow_row = rows[slow.url.split("//")[1].rstrip("/")]
                            assert '<span class="st st-gone">blocked</span>' in throttled_row, throttled_row
                            assert "<td>3600s</td>" in slow_row and ">held</span>" in slow_row, slow_row
                    finally:
                        stop.set()
                        await asyncio.wait_for(pipeline, 60)
    finally:
        await engine.dispose()
