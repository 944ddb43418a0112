"""A local SQS-compatible server for the tests: moto's server mode, started as a subprocess.

The session fixture ``sqs_endpoint`` starts ``python -m moto.server`` on a free loopback port (moto comes
with crawlherd's ``test`` extra) and stops it at the end of the run. Every test uses queues of its own
(``unique_name``), and :func:`delete_queues` removes them afterwards. What this server does not prove
about real SQS is listed in docs/brokers.md.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from .._netutil import free_port
from .services import missing

__all__ = ["delete_queues", "sqs_endpoint", "sqs_url"]

REGION = "us-east-1"
CREDENTIALS = "testing:testing"  # moto accepts any; botocore wants some


def sqs_url(endpoint: str, queue: str, **options: object) -> str:
    """An ``sqs://`` broker URL for ``queue`` on the local server."""
    query = "&".join([f"region={REGION}", f"endpoint_url={quote(endpoint, safe='')}",
                      *(f"{k}={quote(str(v), safe='')}" for k, v in options.items())])
    return f"sqs://{CREDENTIALS}@{queue}?{query}"


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto server for this test session."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        missing("moto's server mode is not installed (moto, flask, flask-cors: pip install -e '.[test]')")
    port = free_port()
    env = {**os.environ, "MOTO_PORT": str(port)}
    main = Path(__file__).with_name("_moto_main.py")
    # its request log goes to a file: a pipe nobody reads would fill up and stall the server
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen([sys.executable, str(main), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=log, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        import socket

        while True:
            if proc.poll() is not None:
                log.seek(0)
                err = log.read().decode(errors="replace")
                pytest.fail(f"the moto server exited with {proc.returncode}: {err[-2000:]}", pytrace=False)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("the moto server did not listen within 60 s", pytrace=False)
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def delete_queues(endpoint: str, *names: str) -> None:
    """Delete the named queues (and nothing else) on the local server; missing ones are fine."""
    from botocore.exceptions import ClientError

    from crawlherd.brokers._sqs_wire import aws_session

    key, secret = CREDENTIALS.split(":")
    async with aws_session().create_client("sqs", region_name=REGION, endpoint_url=endpoint,
                                           aws_access_key_id=key, aws_secret_access_key=secret) as client:
        for name in names:
            try:
                url = (await client.get_queue_url(QueueName=name))["QueueUrl"]
                await client.delete_queue(QueueUrl=url)
            except ClientError:
                pass
