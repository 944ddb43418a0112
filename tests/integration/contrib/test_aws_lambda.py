"""The Lambda handler, invoked as the Lambda Python runtime does: a fresh process imports the module
named by the handler string and calls ``handler(event, context)`` with a context whose
``get_remaining_time_in_millis`` tells the deadline. Config DB: a SQLite file; broker: SQS (moto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from crawlherd.brokers import open_broker
from crawlherd.db import create_engine, upgrade
from crawlherd.messages import decode_job
from tests.support.db import add_targets, add_website, database_now
from tests.support.docblocks import doc_block
from tests.support.sqs_server import delete_queues, sqs_url

pytestmark = pytest.mark.sqs

ROOT = Path(__file__).resolve().parents[3]

# What the Lambda runtime does with the handler string "crawlherd.contrib.aws_lambda.handler".
INVOKE = """
import importlib, json, sys, time
module_name, _, attr = sys.argv[1].rpartition(".")
handler = getattr(importlib.import_module(module_name), attr)
remaining_ms = int(sys.argv[2])
started = time.monotonic()

class Context:
    function_name = "crawlherd-dispatch"
    aws_request_id = "test-request"
    def get_remaining_time_in_millis(self):
        return max(0, int(remaining_ms - (time.monotonic() - started) * 1000))

print(json.dumps(handler({"source": "aws.events", "detail-type": "Scheduled Event"}, Context())))
"""


def handler_of_the_doc() -> str:
    """The ``Handler`` of the SAM template in docs/integrations.md."""
    template = yaml.safe_load(doc_block("lambda-template"))
    props = template["CrawlherdDispatch"]["Properties"]
    assert set(props["Environment"]["Variables"]) == {"CRAWLHERD_DATABASE_URL", "CRAWLHERD_BROKER_URL",
                                                      "CRAWLHERD_LAMBDA_MARGIN"}
    return str(props["Handler"])


def invoke(env: dict[str, str], remaining_ms: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", INVOKE, handler_of_the_doc(), str(remaining_ms)],
                         cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def test_lambda_handler_runs_one_cycle_within_its_deadline(
    tmp_path: Path, sqs_endpoint: str, unique_name: str
) -> None:
    db_url = f"sqlite:///{tmp_path / 'config.db'}"
    broker_url = sqs_url(sqs_endpoint, unique_name)
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        site = await add_website(engine)
        now = await database_now(engine)
        ids = await add_targets(engine, site, 3, every=timedelta(hours=1), anchor=now - timedelta(seconds=5))
        env = {"CRAWLHERD_DATABASE_URL": db_url, "CRAWLHERD_BROKER_URL": broker_url, "CRAWLHERD_LAMBDA_MARGIN": "2"}

        # Less time left than the margin: the handler returns at once, having claimed nothing.
        late = invoke(env, remaining_ms=1500)
        assert late == {"targets": 0, "slots": 0, "inserted": 0, "published": 0, "failed": 0, "stopped_early": True}

        result = invoke(env, remaining_ms=60_000)
        assert result == {"targets": 3, "slots": 3, "inserted": 3, "published": 3, "failed": 0,
                          "stopped_early": False}
        # the next scheduled invocation finds nothing due
        again = invoke(env, remaining_ms=60_000)
        assert (again["targets"], again["published"]) == (0, 0)

        async with open_broker(broker_url, wait_time=1) as broker:
            assert await broker.pending() == 3
            got = []
            it = broker.consume(prefetch=10)
            for _ in range(3):
                d = await anext(it)
                got.append(decode_job(d.body).target_id)
                await broker.ack(d)
        assert sorted(got) == sorted(ids)
    finally:
        await engine.dispose()
        await delete_queues(sqs_endpoint, unique_name, f"{unique_name}-dead")
