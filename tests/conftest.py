"""Shared fixtures: the real services (PostgreSQL, Redis, RabbitMQ) and their skip/fail policy.

A test that needs a service asks for its fixture. When the service cannot be reached, the test is
skipped -- loudly, listed at the end of the run -- unless ``CRAWLHERD_REQUIRE_SERVICES=1`` (as in CI),
in which case it fails.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from tests.support.chromium import shared_chromium  # noqa: F401 - one Chromium per test process
from tests.support.db import (  # noqa: F401 - the config DB fixtures
    config_db_url,
    migrated_postgres,
    migrated_sqlite,
    pg_database,
    postgres_db_url,
    sqlite_db_url,
)
from tests.support.httpserver import http_server  # noqa: F401 - the test HTTP server fixture
from tests.support.passwords import cheap_password_hashes
from tests.support.services import REQUIRE_SERVICES, missing, missing_services, require_service, require_tool
from tests.support.sqs_server import sqs_endpoint  # noqa: F401 - the local SQS server fixture

__all__ = ["REQUIRE_SERVICES", "require_service"]

POSTGRES_URL = os.environ.get("CRAWLHERD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("CRAWLHERD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("CRAWLHERD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


#: Where scratch files go when the caller did not choose (TMPDIR): a RAM file system, if the machine has one.
RAM_DIR = "/dev/shm"


def pytest_configure(config: pytest.Config) -> None:
    """Console passwords hashed cheaply (:mod:`tests.support.passwords`). Scratch files (``tmp_path``, the
    private servers' data, the SQLite files of the processes the tests start) on a RAM file system where
    there is one and TMPDIR does not say otherwise: the tests kill processes, never machines, so what a file
    system keeps across a power cut is not theirs to test, and each commit's fsync on a disk is 20-40 ms of
    waiting (a SQLite frontier opened for every example of a property test). Set TMPDIR to keep them on
    disk."""
    cheap_password_hashes()
    _bytecode_cache(config)
    # The Playwright driver (node) compiles its JavaScript on each start unless told where to keep it:
    # ~0.2 CPU-s of the ~0.8 each of the run's ~50 drivers costs to start.
    os.environ.setdefault("NODE_COMPILE_CACHE", str(config.rootpath / ".pytest_cache" / "node-compile-cache"))
    if os.environ.get("TMPDIR") or not os.path.isdir(RAM_DIR) or not os.access(RAM_DIR, os.W_OK):
        return
    if shutil.disk_usage(RAM_DIR).free < 2 << 30:
        return
    os.environ["TMPDIR"] = tempfile.tempdir = RAM_DIR


def _bytecode_cache(config: pytest.Config) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (as in many container images), compiled modules are kept all
    the same, under ``.pytest_cache/pycache`` (``PYTHONPYCACHEPREFIX``), for this process, its xdist
    workers and every process the tests start: otherwise each of the run's ~100 Python processes compiles
    crawlherd again (about 0.5 s of CPU each) and each worker every test module. Nothing is written beside
    the sources, which is what that setting is for."""
    if not sys.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = str(config.rootpath / ".pytest_cache" / "pycache")
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private Redis Cluster of three masters for this test session (started on free ports, ended by
    PID at the end of the session)."""
    from tests.support.rediscluster import LocalCluster

    require_tool("redis-server", "for the Redis Cluster tests")
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
        missing(f"no browser: {exc}")


@pytest.fixture
def unique_name() -> str:
    """A name no other test (or concurrent test run) uses: for key prefixes, queues, schemas."""
    return f"t{uuid.uuid4().hex[:12]}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The services missing, loudly: from the skip reports, which reach the xdist controller too."""
    messages = missing_services(terminalreporter.stats.get("skipped", []))
    if messages:
        terminalreporter.section("SERVICES MISSING: tests skipped", sep="!", red=True, bold=True)
        for message in messages:
            terminalreporter.write_line(f"  {message}", red=True)
        terminalreporter.write_line(
            "  Start them (see README, 'Running the tests') or set CRAWLHERD_REQUIRE_SERVICES=1 to fail."
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``): the tests of the private Redis Cluster (a session
    fixture of three redis-servers) run on one worker, which starts it once. Every other test isolates
    itself on the shared services (unique names, prefixes, databases, free ports) -- but the tests that
    load RabbitMQ hardest (25,000 publishes each with a stall deadline: the three dispatcher processes
    on each broker) share the group ``rabbitmq-heavy`` (their own marker), one after the other: run
    together, one starved the other's confirms for seconds.

    The longest tests (:data:`LONGEST`) go first, the rest keep their order: xdist hands tests out in
    this order, and a long test handed out last is the run's tail."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        if "redis_cluster_url" in getattr(item, "fixturenames", ()) or "redis-cluster" in params:
            item.add_marker(pytest.mark.xdist_group("redis-cluster"))
    items.sort(key=_longest_first)


#: The longest tests (30 s and more on an idle machine), handed out first, longest first: one of them handed
#: out late would be the run's tail.
LONGEST = (
    "test_a_75_second_broker_hang_loses_no_slot",
    "test_three_dispatcher_processes_500_targets_50_slots",
    "test_dispatch_says_each_outage_once_and_loses_nothing",
    "test_sigterm_to_every_worker_at_once_then_a_restart",
    "test_celery_beat_and_worker_targets_to_items_once_per_slot",
    "test_the_console_end_to_end",
    "test_two_dispatchers_and_two_workers_carry_on_through_a_restart",
)


def _longest_first(item: pytest.Item) -> int:
    """The sort key of :func:`pytest_collection_modifyitems`: the place of the test in :data:`LONGEST`."""
    name = getattr(item, "originalname", item.name)
    return LONGEST.index(name) if name in LONGEST else len(LONGEST)
