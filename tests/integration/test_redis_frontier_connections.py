"""The Redis frontier's connections stay bounded through an outage: every failed call makes the frontier
look up the cluster's map again, and what it opened for the old map must not pile up until ``close()``.

The outage: a private one-node Redis Cluster (the test's own ports, ended by PID) that refuses every
write -- ``NOREPLICAS`` (``min-replicas-to-write 1`` and no replica) or ``OOM`` (``maxmemory 1``) -- while
it still answers ``CLUSTER SLOTS``: the frontier connects, and each call fails with the typed outage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawlherd.errors import BackendUnavailableError
from crawlherd.frontier import open_scheduler
from crawlherd.request import Request
from tests.support.rediscluster import LocalCluster

pytestmark = pytest.mark.redis

CALLS = 40


REFUSALS = {
    "noreplicas": {"min-replicas-to-write": 1},
    "oom": {"maxmemory-policy": "noeviction", "maxmemory": 1},
}


@pytest.fixture(params=sorted(REFUSALS))
def full_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """One master holding every slot, refusing every write."""
    cluster = LocalCluster(tmp_path, masters=1)
    try:
        cluster.start()
        port = next(iter(cluster.procs))
        admin = redis.Redis(port=port, socket_timeout=5)
        try:
            for name, value in REFUSALS[request.param].items():
                admin.config_set(name, value)
        finally:
            admin.close()
        yield cluster
    finally:
        cluster.stop()


def connected_clients(port: int) -> int:
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        return int(client.info("clients")["connected_clients"]) - 1  # not this one
    finally:
        client.close()


@pytest.mark.timeout(60)
async def test_outage_errors_keep_the_connections_bounded(full_cluster: LocalCluster, unique_name: str) -> None:
    port = next(iter(full_cluster.procs))
    frontier = open_scheduler(f"{full_cluster.url}?prefix={unique_name}")
    roles = set()
    try:
        for i in range(CALLS):
            with pytest.raises(BackendUnavailableError) as caught:
                await frontier.enqueue_request(Request(f"http://h{i}.test/"))
            roles.add(caught.value.role)
        # one master: the frontier needs one connection to it (a few while a call is out), not one per error
        assert connected_clients(port) <= 3
        assert roles == {"frontier"}
    finally:
        await frontier.close()
    assert connected_clients(port) == 0
