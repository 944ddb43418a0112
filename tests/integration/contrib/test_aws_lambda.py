"""The Lambda handler, invoked as the Lambda Python runtime does: import the module named by the handler
string of the SAM template in docs/integrations.md and call ``handler(event, context)`` with a context
whose ``get_remaining_time_in_millis`` tells the deadline. Config DB: a SQLite file; broker: SQS (moto)."""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from crawlherd.brokers import open_broker
from crawlherd.contrib import aws_lambda
from crawlherd.contrib.cycle import cycle_timing
from crawlherd.db import create_engine, upgrade
from crawlherd.messages import decode_job
from tests.support.db import add_targets, add_website, database_now
from tests.support.docblocks import doc_block
from tests.support.sqs_server import delete_queues, sqs_url

pytestmark = pytest.mark.sqs

class Context:
    """What the Lambda runtime passes as ``context``: the deadline counts down from the invocation."""

    function_name = "crawlherd-dispatch"
    aws_request_id = "test-request"

    def __init__(self, remaining_ms: int) -> None:
        self._deadline = time.monotonic() + remaining_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def handler_of_the_doc() -> str:
    """The ``Handler`` of the SAM template in docs/integrations.md."""
    template = yaml.safe_load(doc_block("lambda-template"))
    props = template["CrawlherdDispatch"]["Properties"]
    assert set(props["Environment"]["Variables"]) == {"CRAWLHERD_DATABASE_URL", "CRAWLHERD_BROKER_URL",
                                                      "CRAWLHERD_LAMBDA_MARGIN"}
    return str(props["Handler"])


def invoke(remaining_ms: int) -> dict[str, object]:
    """What the runtime does with the handler string: import the module, call the function (from a
    thread with no event loop running, as this synchronous test is)."""
    module_name, _, attr = handler_of_the_doc().rpartition(".")
    handler = getattr(importlib.import_module(module_name), attr)
    result: dict[str, object] = handler({"source": "aws.events", "detail-type": "Scheduled Event"},
                                        Context(remaining_ms))
    json.dumps(result)  # the runtime serialises it
    return result


def test_lambda_handler_runs_one_cycle_within_its_deadline(
    tmp_path: Path, sqs_endpoint: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url = f"sqlite:///{tmp_path / 'config.db'}"
    broker_url = sqs_url(sqs_endpoint, unique_name)
    ids = asyncio.run(_due_targets(db_url, 3))
    try:
        for name, value in {"CRAWLHERD_DATABASE_URL": db_url, "CRAWLHERD_BROKER_URL": broker_url,
                            "CRAWLHERD_LAMBDA_MARGIN": "2"}.items():
            monkeypatch.setenv(name, value)

        # Less time left than the margin: the handler returns at once, having claimed nothing.
        late = invoke(remaining_ms=1500)
        assert late == {"targets": 0, "slots": 0, "inserted": 0, "published": 0, "failed": 0, "stopped_early": True}

        result = invoke(remaining_ms=60_000)
        assert result == {"targets": 3, "slots": 3, "inserted": 3, "published": 3, "failed": 0,
                          "stopped_early": False}
        warm = (aws_lambda._WARM.loop, aws_lambda._WARM.engine, aws_lambda._WARM.broker)
        assert None not in warm
        # the next scheduled invocation finds nothing due -- in the same loop, engine and broker client
        again = invoke(remaining_ms=60_000)
        assert (again["targets"], again["published"]) == (0, 0)
        assert (aws_lambda._WARM.loop, aws_lambda._WARM.engine, aws_lambda._WARM.broker) == warm

        assert sorted(asyncio.run(_jobs_on_the_queue(broker_url, 3))) == sorted(ids)
    finally:
        aws_lambda._WARM.shutdown()
        asyncio.run(delete_queues(sqs_endpoint, unique_name, f"{unique_name}-dead"))


@pytest.mark.parametrize("deadline", [0.5, 5.0, 48.0, 290.0, 890.0])
def test_a_relay_round_started_last_still_ends_within_the_deadline(deadline: float) -> None:
    stop_after, round_timeout = cycle_timing(deadline, lease=60.0)
    assert stop_after is not None and round_timeout is not None
    assert stop_after > 0 and 0 < round_timeout <= 30.0  # at most half the lease (the relay's own bound)
    assert stop_after + round_timeout <= deadline
    assert cycle_timing(None, lease=60.0) == (None, None)
    assert cycle_timing(-1.0, lease=60.0) == (-1.0, None)  # already late: stop at once


async def _due_targets(db_url: str, n: int) -> list[int]:
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        site = await add_website(engine)
        now = await database_now(engine)
        return await add_targets(engine, site, n, every=timedelta(hours=1), anchor=now - timedelta(seconds=5))
    finally:
        await engine.dispose()


async def _jobs_on_the_queue(broker_url: str, n: int) -> list[int]:
    async with open_broker(broker_url, wait_time=1) as broker:
        assert await broker.pending() == n
        got = []
        it = broker.consume(prefetch=10)
        for _ in range(n):
            d = await anext(it)
            got.append(decode_job(d.body).target_id)
            await broker.ack(d)
        return got
