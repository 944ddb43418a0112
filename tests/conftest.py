"""Shared fixtures: the real services (PostgreSQL, Redis, RabbitMQ) and their skip/fail policy.

A test that needs a service asks for its fixture. When the service cannot be reached, the test is
skipped -- loudly, listed at the end of the run -- unless ``CRAWLHERD_REQUIRE_SERVICES=1`` (as in CI),
in which case it fails.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest

from tests.support.sqs_server import sqs_endpoint  # noqa: F401 - the local SQS server fixture

REQUIRE_SERVICES = os.environ.get("CRAWLHERD_REQUIRE_SERVICES") == "1"

POSTGRES_URL = os.environ.get("CRAWLHERD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("CRAWLHERD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("CRAWLHERD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

_skipped_services: dict[str, str] = {}


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or, with CRAWLHERD_REQUIRE_SERVICES=1, fail) when ``name`` is not listening."""
    if _reachable(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} and CRAWLHERD_REQUIRE_SERVICES=1", pytrace=False)
    _skipped_services[name] = message
    pytest.skip(f"SERVICE MISSING: {message} (set CRAWLHERD_REQUIRE_SERVICES=1 to fail instead)")


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private Redis Cluster of three masters for this test session (started on free ports, ended by
    PID at the end of the session)."""
    import shutil

    from tests.support.rediscluster import LocalCluster

    if shutil.which("redis-server") is None:
        if REQUIRE_SERVICES:
            pytest.fail("redis-server is not installed and CRAWLHERD_REQUIRE_SERVICES=1", pytrace=False)
        pytest.skip("SERVICE MISSING: redis-server is not installed (for the Redis Cluster tests)")
    cluster = LocalCluster(tmp_path_factory.mktemp("rediscluster"))
    try:
        yield cluster.start().url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    return POSTGRES_URL


@pytest.fixture(scope="session")
def redis_url() -> str:
    require_service("Redis", "127.0.0.1", 6379)
    return REDIS_URL


@pytest.fixture(scope="session")
def amqp_url() -> str:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    return AMQP_URL


@pytest.fixture(scope="session")
def chromium() -> str:
    """The system Chromium's path; skipped (or failed under CRAWLHERD_REQUIRE_SERVICES=1) when missing."""
    from crawlherd.errors import CrawlherdError
    from crawlherd.fetch.browser import find_chromium

    try:
        return find_chromium()
    except (CrawlherdError, ImportError) as exc:
        message = f"no browser: {exc}"
        if REQUIRE_SERVICES:
            pytest.fail(f"{message} and CRAWLHERD_REQUIRE_SERVICES=1", pytrace=False)
        _skipped_services["Chromium"] = message
        pytest.skip(f"SERVICE MISSING: {message}")


@pytest.fixture
def unique_name() -> str:
    """A name no other test (or concurrent test run) uses: for key prefixes, queues, schemas."""
    return f"t{uuid.uuid4().hex[:12]}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped_services:
        terminalreporter.section("SERVICES MISSING: tests skipped", sep="!", red=True, bold=True)
        for message in _skipped_services.values():
            terminalreporter.write_line(f"  {message}", red=True)
        terminalreporter.write_line(
            "  Start them (see README, 'Running the tests') or set CRAWLHERD_REQUIRE_SERVICES=1 to fail."
        )
