"""Poison messages on every broker: bodies a worker cannot process are dead-lettered with their reason
after a bounded number of deliveries, never requeued in a loop, and a good job queued behind them is
still done by a worker running two jobs at once.

The poison: a 100,000-deep JSON nesting (``RecursionError`` in ``json.loads``), a ``schema_version`` of
the wrong type (an unhashable list), fields of the wrong types, a 10 MB body, a body that is not UTF-8,
and a well-formed job for a target that no longer exists (a foreign-key error when its run is
recorded). The old worker requeued each of these at once, forever."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.brokers.memory import MemoryBroker
from crawlherd.db import JobRun
from crawlherd.dispatch.dispatch_service import DispatchService
from crawlherd.fetch.base import FetchLimits
from crawlherd.messages import decode_job, encode_job, idempotency_key, job_id_for
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.dispatch import dispatch_due, relay_all
from tests.support.fixtures import broker_url  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(120)



def poison_bodies() -> dict[str, tuple[bytes, str]]:
    """name -> (body, a part of the dead letter's reason)."""
    wrong_types = {
        "schema_version": 2, "job_id": ["x"], "idempotency_key": 7, "target_id": {"a": 1}, "slot_at": [],
        "website_id": "one", "site": "a string", "search_url": 5, "keywords_used": None, "created_at": 0,
    }
    return {
        "deep": (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
        "version-list": (b'{"schema_version": [2]}', "schema_version"),
        "wrong-types": (json.dumps(wrong_types).encode(), "invalid job message"),
        "huge": (b'{"schema_version": 2, "pad": "' + b"a" * 10_000_000 + b'"}', "larger than"),
        "not-utf8": (b'{"schema_version": 2, "k": "\xff\xfe\xfd"}', "not valid UTF-8"),
    }


async def test_poison_is_dead_lettered_with_reasons_and_the_good_job_behind_it_is_done(
    engine: AsyncEngine, board: Board, tmp_path: Path, broker_url: str  # noqa: F811
) -> None:
    await load(engine, tmp_path, website(board, robots="ignore"), ["good"], due=True)
    recorder = MemoryBroker.from_url("memory://", record=True)
    async with recorder:  # the dispatch service's message for the good job, to publish it last
        service = DispatchService(engine, recorder)
        await dispatch_due(service)
        await relay_all(service)
    [(good_key, good_body)] = recorder.published
    good = decode_job(good_body)
    gone = good.model_copy(update={  # well-formed, for a target that was deleted since
        "target_id": 999_999,
        "idempotency_key": idempotency_key(999_999, good.slot_at),
        "job_id": job_id_for(999_999, good.slot_at),
    })
    poison = poison_bodies()
    async with open_broker(broker_url) as broker:
        for name, (body, _) in poison.items():
            await broker.publish(body, key=f"poison-{name}")
        await broker.publish(encode_job(gone), key=gone.idempotency_key)
        await broker.publish(good_body, key=good_key)

        worker = Worker(
            engine,
            broker,
            WorkerOptions(concurrency=2, limits=FetchLimits(allow_private_addresses=True), backoff=0.1, name="w"),
        )
        stop = asyncio.Event()
        async with worker:
            running = asyncio.create_task(worker.run(stop))
            while True:  # until the good job is done and the poison is all dead (bounded by the timeout)
                dead = await broker.dead_letters(limit=20)
                async with engine.connect() as conn:
                    statuses = (await conn.execute(select(JobRun.status))).scalars().all()
                if len(dead) >= len(poison) + 1 and statuses == ["succeeded"]:
                    break
                assert not running.done(), running
                await asyncio.sleep(0.1)
            stop.set()
            await running
        reasons = {d.key: d.reason for d in dead}
        assert await broker.pending() == 0
    assert sorted(reasons) == sorted([*(f"poison-{n}" for n in poison), gone.idempotency_key])
    for name, (_, why) in poison.items():
        assert why in reasons[f"poison-{name}"], (name, reasons[f"poison-{name}"])
    assert "target 999999 no longer exists" in reasons[gone.idempotency_key]
    assert worker.stats.succeeded == 1 and worker.stats.invalid == len(poison) and worker.stats.dead == 1
    assert worker.stats.requeued == 0  # nothing went back for an immediate redelivery
    assert len(board.fetched("/search")) == 1
