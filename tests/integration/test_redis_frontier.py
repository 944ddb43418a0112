"""What the ``redis://`` frontier does beyond the contract suite, against the real Redis."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from crawlherd.clock import FakeClock
from crawlherd.errors import BackendUnavailableError, ConfigurationError, LeaseError
from crawlherd.frontier import open_scheduler
from crawlherd.frontier.dupefilter import fp_to_int
from crawlherd.frontier.redis import RedisFrontier
from crawlherd.request import Request
from tests.support.private_redis import PrivateRedis

from .test_durable_frontier import delete_prefix

pytestmark = pytest.mark.redis


@pytest.fixture
async def client(redis_url: str, unique_name: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()
    await delete_prefix(redis_url, unique_name)
    await delete_prefix(redis_url, unique_name + "b")


async def open_redis(redis_url: str, prefix: str, **options: Any) -> RedisFrontier:
    options.setdefault("clock", FakeClock())
    frontier = open_scheduler(f"{redis_url}?prefix={prefix}", **options)
    assert isinstance(frontier, RedisFrontier)
    return await frontier.__aenter__()


async def loose_of(client: aioredis.Redis, key: str, host: str) -> list[tuple[bytes, float]]:
    """The loose requests (``gq``) of ``host``."""
    return [(m, s) for m, s in await client.zrange(key, 0, -1, withscores=True) if m.startswith(f"{host}\t".encode())]


async def test_plain_bodies_are_read_and_one_without_a_fingerprint_is_moved_aside(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """A plain GET is stored as "<priority> <depth> <url> <fingerprint>" and handed out without parsing
    its URL again; the form without the fingerprint (written before 0.1.0, never released) is not read
    any more: like one whose fingerprint field is not one, it is moved aside."""
    frontier = await open_redis(redis_url, unique_name)
    try:
        originals = [Request(f"http://H{i}.test:80/a/../p?b=2&a=1", priority=3, depth=2) for i in range(3)]
        await frontier.enqueue_requests(originals)
        key = f"{unique_name}:gq"  # hosts that could give them at once: the loose requests, "<host>\t<score>\t<member>"
        (member, score), = await loose_of(client, key, "h0.test")
        head, body = member.rsplit(b"\t", 1)
        assert body == f"3 2 {originals[0].url} {originals[0].fingerprint.hex()}".encode()
        await client.zrem(key, member)
        await client.zadd(key, {head + b"\t" + body.rsplit(b" ", 1)[0]: score})  # the older form
        (member2, score2), = await loose_of(client, key, "h1.test")
        await client.zrem(key, member2)
        await client.zadd(key, {member2.rsplit(b" ", 1)[0] + b" zz": score2})
        leases = await frontier.next_requests(10)
        got = {lease.request.host: lease.request for lease in leases}
        assert sorted(got) == ["h2.test"]
        request = got["h2.test"]
        assert (request.url, request.fingerprint, request.priority, request.depth, request.method) == (
            originals[2].url, originals[2].fingerprint, 3, 2, "GET"
        )
        assert sorted(b.split("\t", 1)[0] for b in (await frontier.bad_entries()).values()) == [
            "undecodable request record: non-hexadecimal number found in fromhex() arg at position 0",
            "undecodable request record: not enough values to unpack (expected 4, got 3)",
        ]
        await frontier.ack_many(leases)
    finally:
        await frontier.close()


async def test_corrupt_and_foreign_entries_are_moved_aside(
    redis_url: str, unique_name: str, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    frontier = await open_redis(redis_url, unique_name)
    try:
        for i in range(4):
            assert await frontier.enqueue_request(Request(f"http://h{i}.test/"))
        # each request is one member of the loose requests, "<host>\t<score>\t<id>\t<batch>\t<body>":
        # replace three
        key = f"{unique_name}:gq"
        members = [(await loose_of(client, key, f"h{i}.test"))[0] for i in range(4)]
        ids = [int(m.split(b"\t", 3)[2]) for m, _ in members]
        s = [int(score) for _, score in members]
        foreign = json.dumps({"v": 99, "url": "http://h2.test/"})
        bodies = [f"h0.test\t{s[0]}\t{ids[0]}\t\x80\x81 pickled?".encode(), f"h1.test\t{s[1]}\t{ids[1]}\t1\t{{not json",
                  f"h2.test\t{s[2]}\t{ids[2]}\t1\t{foreign}"]
        for i, body in enumerate(bodies):  # the first has no readable header
            await client.zrem(key, members[i][0])
            await client.zadd(key, {body: members[i][1]})
        with caplog.at_level(logging.WARNING, logger="crawlherd.frontier.redis"):
            leases = await frontier.next_requests(10)
        assert [lease.request.url for lease in leases] == ["http://h3.test/"]
        bad = await frontier.bad_entries()
        assert sorted(bad) == [str(i) for i in ids[:3]]
        assert bad[str(ids[0])].startswith("unreadable entry header")
        assert bad[str(ids[1])].startswith("undecodable request record")
        assert "version-1" in bad[str(ids[2])]
        assert "moved entry" in caplog.text
        await frontier.ack(leases[0])
        assert await frontier.idle()  # nothing left stuck in flight or queued
    finally:
        await frontier.close()


async def test_dupefilter_unavailable_fail_or_allow(redis_url: str, unique_name: str, client: aioredis.Redis) -> None:
    req = Request("http://df.test/page")
    strict = await open_redis(redis_url, unique_name)
    try:
        bits = strict._bits
        bucket = fp_to_int(req.fingerprint) & ((1 << bits) - 1)
        await client.set(f"{unique_name}:df:{bucket}", "a foreign key where a bucket should be")
        with pytest.raises(BackendUnavailableError, match="duplicate filter"):
            await strict.enqueue_request(req)
        assert await strict.size() == 0  # nothing queued, nothing lost: the caller still has it
    finally:
        await strict.close()
    lenient = await open_redis(redis_url, unique_name, dupefilter_unavailable="allow")
    try:
        assert await lenient.enqueue_request(req)
        assert await lenient.enqueue_request(req)  # unfiltered: queued again
        stats = await lenient.stats()
        assert stats.dupefilter_unavailable == 2
        assert stats.queued == 2
    finally:
        await lenient.close()


async def test_redis_down_raises_backend_unavailable_and_redacts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
    frontier = open_scheduler(f"redis://:hunter2@127.0.0.1:{port}/0?prefix=x", socket_timeout=1)
    with pytest.raises(BackendUnavailableError) as info:
        await frontier.__aenter__()
    assert "hunter2" not in str(info.value)
    assert info.value.backend == "redis"
    lazy = open_scheduler(f"redis://127.0.0.1:{port}/0?prefix=x", socket_timeout=1)  # not entered
    try:
        with pytest.raises(BackendUnavailableError):
            await lazy.enqueue_request(Request("http://a.test/"))
        with pytest.raises(BackendUnavailableError):
            await lazy.next_request()
    finally:
        await lazy.close()


async def test_live_client_is_used_and_not_closed(redis_url: str, unique_name: str, client: aioredis.Redis) -> None:
    async with open_scheduler(f"{redis_url}?prefix={unique_name}", client=client) as frontier:
        assert await frontier.enqueue_request(Request("http://live.test/"))
    assert await client.ping()  # still open: the frontier closes only what it opened
    assert await client.exists(f"{unique_name}:gq") == 1  # its loose requests (the host could give it at once)


async def test_prefixes_are_separate_frontiers(redis_url: str, unique_name: str, client: aioredis.Redis) -> None:
    a = await open_redis(redis_url, unique_name)
    b = await open_redis(redis_url, unique_name + "b")
    try:
        assert await a.enqueue_request(Request("http://p.test/1"))
        assert await b.enqueue_request(Request("http://p.test/1"))  # not a duplicate over there
        assert await a.size() == 1 and await b.size() == 1
        assert await b.purge() > 0
        assert await b.size() == 0
        assert await a.size() == 1
    finally:
        await a.close()
        await b.close()


async def test_the_dupefilter_kind_is_fixed_at_creation(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    async with open_scheduler(f"{redis_url}?prefix={unique_name}&dupefilter=bloom"):
        pass
    with pytest.raises(ConfigurationError, match="dupefilter='bloom'"):
        async with open_scheduler(f"{redis_url}?prefix={unique_name}"):
            pass


async def test_exact_filter_is_compact(redis_url: str, unique_name: str, client: aioredis.Redis) -> None:
    # 64 buckets of ~300 fingerprints each: intset-encoded, 8 bytes per fingerprint plus headers.
    frontier = await open_redis(redis_url, unique_name, dupefilter_bits=6)
    try:
        n = 20_000
        assert await frontier.enqueue_requests(Request(f"http://c{i % 50}.test/{i}") for i in range(n)) == n
        assert await frontier.enqueue_requests(Request(f"http://c{i % 50}.test/{i}") for i in range(0, n, 7)) == 0
        assert await client.object("encoding", f"{unique_name}:df:0") == b"intset"
        used = await frontier.memory_usage()
        per_fp = used["dupefilter"] / n
        assert 8 <= per_fp < 12, per_fp
    finally:
        await frontier.close()


async def test_bloom_filter_grows_without_false_negatives(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    frontier = await open_redis(redis_url, unique_name, dupefilter="bloom", capacity=100, error_rate=1e-4)
    try:
        reqs = [Request(f"http://b{i % 9}.test/{i}") for i in range(700)]
        queued = await frontier.enqueue_requests(reqs)
        assert queued >= 690  # a few false positives are allowed by error_rate
        assert await frontier.enqueue_requests(reqs) == 0
        layers = int(await client.hget(f"{unique_name}:bloom", "n") or 0)
        assert layers >= 3  # 100 + 200 + 400 ...
    finally:
        await frontier.close()


async def test_two_clients_never_lease_the_same_request(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    import asyncio

    clock = FakeClock()
    a = await open_redis(redis_url, unique_name, clock=clock, max_in_flight=1000)
    b = await open_redis(redis_url, unique_name, clock=clock, max_in_flight=1000)
    try:
        await a.enqueue_requests(Request(f"http://race{i % 5}.test/{i}") for i in range(500))

        async def take(f: RedisFrontier) -> list[str]:
            got = []
            while leases := await f.next_requests(7):
                got += [lease.request.url for lease in leases]
                await f.ack_many(leases)
            return got

        got_a, got_b = await asyncio.gather(take(a), take(b))
        assert len(got_a) + len(got_b) == 500
        assert len(set(got_a) | set(got_b)) == 500
        assert await a.idle()
    finally:
        await a.close()
        await b.close()


async def test_cli_stats_and_purge_on_redis(redis_url: str, unique_name: str, client: aioredis.Redis) -> None:
    import asyncio

    from click.testing import CliRunner

    from crawlherd.cli import main

    url = f"{redis_url}?prefix={unique_name}"
    async with open_scheduler(url) as f:
        await f.enqueue_requests(Request(f"http://cli.test/{i}") for i in range(5))
    runner = CliRunner()
    # the CLI runs its own event loop: run it in a thread, as a user's shell would run it apart
    result = await asyncio.to_thread(runner.invoke, main, ["frontier", "stats", "--url", url, "--json", "--memory"])
    assert result.exit_code == 0, result.output
    snapshot = json.loads(result.output)
    assert snapshot["queued"] == 5
    assert snapshot["memory_bytes"]["dupefilter"] > 0 and snapshot["memory_bytes"]["queue"] > 0
    purged = await asyncio.to_thread(runner.invoke, main, ["frontier", "purge", "--url", url, "--yes"])
    assert purged.exit_code == 0, purged.output
    assert [k async for k in client.scan_iter(match=f"{unique_name}:*")] == []


async def test_negative_and_huge_priorities_keep_their_order(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    frontier = await open_redis(redis_url, unique_name)
    try:
        prios = [-3, 0, 10**9, 7, -3, -(10**9)]
        for i, prio in enumerate(prios):
            await frontier.enqueue_request(Request(f"http://n{i}.test/", priority=prio))
        leases = await frontier.next_requests(10)
        assert [lease.request.priority for lease in leases] == [10**9, 7, 0, -3, -3, -(10**9)]
        assert [lease.request.url for lease in leases][3:5] == ["http://n0.test/", "http://n4.test/"]  # FIFO
        await frontier.ack_many(leases)
    finally:
        await frontier.close()


async def test_leases_of_several_lease_calls_interleaved_in_one_ack_are_settled_and_the_bad_ones_named(
    redis_url: str, unique_name: str
) -> None:
    """ACK takes the leases as runs of one LEASE call each (its serial once, then their ids), in the order
    sent: leases of two calls interleaved make four runs, and the invalid ones among them are the ones
    named back -- by their places in the whole batch."""
    frontier = await open_redis(redis_url, unique_name)
    try:
        await frontier.enqueue_requests([Request(f"http://r{i}.test/") for i in range(4)])
        first = await frontier.next_requests(2)
        second = await frontier.next_requests(2)
        assert {lease.token.split(":")[1].split(".")[0] for lease in first + second} == {"1", "2"}
        unknown = first[1]._replace(token=f"{first[1].token.split(':')[0]}:2.1@1e300")  # its id, the other call
        with pytest.raises(LeaseError) as info:
            await frontier.ack_many([first[0], second[0], unknown, second[1]])
        assert str(info.value).count("http://") == 1 and first[1].request.url in str(info.value)
        stats = await frontier.stats()
        assert (stats.acked, stats.in_flight) == (3, 1)
        await frontier.ack(first[1])
        assert await frontier.idle()
    finally:
        await frontier.close()


async def test_foreign_tokens_in_a_batch_settle_are_refused_and_the_others_settled(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """ACK reads a batch's tokens as one space-separated argument: a token with a space in it (none of
    ours) must not be split into pieces that pass for others -- it is refused, and so is an unknown one,
    while the valid leases of the batch are settled."""
    frontier = await open_redis(redis_url, unique_name)
    try:
        await frontier.enqueue_requests([Request(f"http://t{i}.test/") for i in range(3)])
        leases = await frontier.next_requests(3)
        good = leases[0]
        spaced = leases[1]._replace(token=f"{leases[1].token} {leases[2].token}")
        unknown = leases[2]._replace(token="999:1.1@1e300")
        with pytest.raises(LeaseError) as info:
            await frontier.ack_many([good, spaced, unknown])
        assert "http://t0.test/" not in str(info.value)
        assert "http://t1.test/" in str(info.value) and "http://t2.test/" in str(info.value)
        stats = await frontier.stats()
        assert (stats.acked, stats.in_flight) == (1, 2)  # the spaced token settled neither of its pieces
        await frontier.ack_many(leases[1:])
        assert await frontier.idle()
    finally:
        await frontier.close()


async def test_a_live_holder_renews_its_leases_in_the_background_and_a_closed_one_stops(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """On the system clock, ``liveness=0.6``: the holder's background renewal (every 0.2 s) keeps its
    lease for several times the bound; once it stops (closed without settling: a process that died),
    another process leases the request after about the bound."""
    from crawlherd.clock import SystemClock

    holder = await open_redis(redis_url, unique_name, clock=SystemClock(), liveness=0.6, lease_timeout=60)
    other = await open_redis(redis_url, unique_name, clock=SystemClock(), liveness=0.6, lease_timeout=60)
    try:
        await holder.enqueue_request(Request("http://renewed.test/1"))
        lease = await holder.next_request()
        assert lease is not None
        for _ in range(10):  # 2 s, 3.3 bounds
            await asyncio.sleep(0.2)
            assert await other.next_request() is None
        await holder.close()
        again = await other.wait_next(timeout=5.0)
        assert again is not None and again.request.url == "http://renewed.test/1"
        assert (await other.stats()).expired_leases == 1
        await other.ack(again)
    finally:
        await holder.close()
        await other.close()


async def test_renewal_drops_what_was_settled_or_taken_back_and_says_only_the_latter(
    redis_url: str, unique_name: str, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    frontier = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=10)
    other = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=10)
    try:
        await frontier.enqueue_requests([Request(f"http://r{i}.test/") for i in range(40)])
        leases = await frontier.next_requests(40)
        assert len(leases) == 40
        with caplog.at_level(logging.WARNING, logger="crawlherd.frontier.redis"):
            # settles racing renewals: a lease being settled is not renewed, nor taken for lost
            await asyncio.gather(frontier.renewal.renew(), frontier.ack_many(leases[:20]), frontier.renewal.renew())
            assert not [r for r in caplog.records if "taken back" in r.getMessage()]
            assert await frontier.renewal.renew() == 20
            clock.advance(11)  # the deadline passes: another process takes the other 20 back
            assert len(await other.next_requests(40)) == 20
            assert await frontier.renewal.renew() == 0
        assert frontier.renewal.held == set()
        assert len([r for r in caplog.records if "20 lease(s) were taken back" in r.getMessage()]) == 1
    finally:
        await frontier.close()
        await other.close()


async def test_a_lease_its_holder_stops_renewing_expires_while_its_siblings_are_renewed(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """The leases of one lease call share one expiry entry; one of them that its holder stops renewing
    (a give-back that could not be sent) still comes back ``liveness`` after its last renewal, while the
    others of the call are renewed and stay the holder's."""
    clock = FakeClock()
    frontier = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=100, liveness=10)
    other = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=100, liveness=10)
    try:
        await frontier.enqueue_requests([Request(f"http://s{i}.test/") for i in range(3)])
        leases = await frontier.next_requests(3)
        assert len(leases) == 3
        frontier.renewal.drop([leases[0].token])
        for _ in range(3):  # 18 s: past the bound for the lease not renewed, not for the others
            clock.advance(6)
            assert await frontier.renewal.renew() == 2
        again = await other.next_requests(3)
        assert [lease.request.url for lease in again] == [leases[0].request.url]
        await frontier.ack_many(leases[1:])
        await other.ack_many(again)
        assert (await frontier.stats()).in_flight == 0
        assert await client.exists(f"{unique_name}:lexp", f"{unique_name}:ldet") == 0
    finally:
        await frontier.close()
        await other.close()


async def test_a_lease_given_back_during_an_outage_is_not_kept_alive(tmp_path: Path) -> None:
    """A retry (a page given back: its work cancelled, or put back) that cannot reach Redis leaves the
    lease unrenewed: it comes back about ``liveness`` after, not at its deadline (``lease_timeout``)
    while the live holder renews a page nothing fetches -- after a frontier restart, that held a job's
    detail pages out for the whole test. A private Redis (AOF), killed and started again."""
    from crawlherd.clock import SystemClock

    redis = PrivateRedis(tmp_path)
    redis.start()
    holder = await open_redis(redis.url, "gb", clock=SystemClock(), liveness=0.6, lease_timeout=60)
    other: RedisFrontier | None = None
    try:
        await holder.enqueue_request(Request("http://given-back.test/1"))
        lease = await holder.next_request()
        assert lease is not None and lease.token in holder.renewal.held
        redis.kill()
        with pytest.raises(BackendUnavailableError):
            await holder.retry(lease)
        assert lease.token not in holder.renewal.held
        redis.start()  # the AOF has the lease
        other = await open_redis(redis.url, "gb", clock=SystemClock(), liveness=0.6, lease_timeout=60)
        again = await other.wait_next(timeout=10.0)
        assert again is not None and again.request.url == "http://given-back.test/1"
        await other.ack(again)
    finally:
        await holder.close()
        if other is not None:
            await other.close()
        redis.kill()


async def test_more_calls_at_once_than_redis_pys_default_pool_are_not_an_outage(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """A worker's pages in flight, each queueing its detail pages one by one, make hundreds of frontier
    calls at once: redis-py's pool of 100 connections would refuse the 101st ("Too many connections"),
    which the worker takes for an outage of the frontier."""
    frontier = await open_redis(redis_url, unique_name)
    try:
        queued = await asyncio.gather(*(frontier.enqueue_request(Request(f"http://h{i % 7}.example/{i}"))
                                        for i in range(300)))
        assert queued == [True] * 300
    finally:
        await frontier.close()


async def gq_as_layout_5(client: aioredis.Redis, key: str) -> list[tuple[bytes, float]]:
    """The loose requests at ``key`` written back as layout 5 wrote them (``"<host>\\t<member>"``, the score
    in the sorted set alone); what layout 6 had there, with the scores."""
    loose: list[tuple[bytes, float]] = await client.zrange(key, 0, -1, withscores=True)
    layout_5 = {}
    for member, score in loose:
        host, written, rest = member.split(b"\t", 2)
        assert float(written) == score  # layout 6: the score in the member too
        layout_5[host + b"\t" + rest] = score
    await client.delete(key)
    if layout_5:
        await client.zadd(key, layout_5)
    return loose


async def the_others_expire_and_come_back(
    frontier: RedisFrontier, clock: FakeClock, leases: list[Any], *, acked: int
) -> None:
    """After an upgrade, ``leases[0]`` acked: the deadline passes and the other leases out before the upgrade
    come back, in their order; their old tokens are refused; the frontier ends idle with ``acked`` acks."""
    clock.advance(11)
    back = await frontier.next_requests(len(leases) - 1)
    assert [lease.request.url for lease in back] == [lease.request.url for lease in leases[1:]]
    assert [lease.request.priority for lease in back] == [lease.request.priority for lease in leases[1:]]
    with pytest.raises(LeaseError):
        await frontier.ack(leases[1])  # taken back: its old token is refused
    await frontier.ack_many(back)
    assert await frontier.idle()
    stats = await frontier.stats()
    assert (stats.acked, stats.expired_leases, stats.in_flight) == (acked, len(leases) - 1, 0)


async def test_the_leases_out_of_a_layout_4_frontier_settle_and_expire_after_the_upgrade(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """Layout 4 kept each lease's record in ``l:<serial>`` (id -> ``"<token>\\t<prio>\\t<host>\\t<member>"``)
    and numbered age batches with ``bseq``: a frontier opened on such keys moves them to layout 5, then 6
    (INIT); a lease out before the upgrade settles with its token, the others expire and come back."""
    clock = FakeClock()
    frontier = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=10)
    try:
        await frontier.enqueue_requests([Request(f"http://u{i}.test/", priority=i) for i in range(3)])
        leases = await frontier.next_requests(3)
        assert len(leases) == 3
    finally:
        await frontier.close()
    # the leases written back as layout 4 wrote them
    (serial,) = {lease.token.split(":", 1)[1].split(".", 1)[0] for lease in leases}
    records = {}
    for line in await client.lrange(f"{unique_name}:lb:{serial}", 0, -1):  # "<host>\t<score>\t<member>" each
        host, score, member = line.decode().split("\t", 2)
        id_ = member.split("\t", 1)[0]
        token = next(lease.token for lease in leases if lease.token.startswith(f"{id_}:"))
        records[id_] = f"{token}\t{-(int(score) // 2**34)}\t{host}\t{member}"
    await client.delete(f"{unique_name}:l:{serial}", f"{unique_name}:lb:{serial}")
    await client.hset(f"{unique_name}:l:{serial}", mapping=records)
    await client.hset(f"{unique_name}:cfg", "layout", "4")
    await client.set(f"{unique_name}:bseq", 10**6)
    again = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=10)
    try:
        assert await client.hget(f"{unique_name}:cfg", "layout") == b"6"
        await again.ack(leases[0])
        await the_others_expire_and_come_back(again, clock, leases, acked=3)
        assert int(await client.get(f"{unique_name}:seq")) > 10**6  # age batches numbered past the old ones
    finally:
        await again.close()


async def test_the_loose_requests_and_leases_of_a_layout_5_frontier_are_read_after_the_upgrade(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """Layout 5 kept the loose requests (``gq``) as ``"<host>\\t<member>"``, their score in the sorted set
    alone, and a LEASE call's lines as one string (``"<id>\\n<score>\\n<host>\\t<member>\\n"`` a lease): a
    frontier opened on such keys moves them to layout 6 (INIT); the queued requests come out in their
    order, a lease out before the upgrade settles with its token, the others expire and come back."""
    clock = FakeClock()
    frontier = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=10)
    try:
        await frontier.enqueue_requests([Request(f"http://u{i}.test/", priority=i % 5) for i in range(20)])
        leases = await frontier.next_requests(3)
        assert [lease.request.priority for lease in leases] == [4, 4, 4]
    finally:
        await frontier.close()
    # the keys written back as layout 5 wrote them
    assert len(await gq_as_layout_5(client, f"{unique_name}:gq")) == 17
    (serial,) = {lease.token.split(":", 1)[1].split(".", 1)[0] for lease in leases}
    lines = []
    for line in await client.lrange(f"{unique_name}:lb:{serial}", 0, -1):
        host, score, member = line.decode().split("\t", 2)
        lines.append(f"{member.split(chr(9), 1)[0]}\n{score}\n{host}\t{member}\n")
    await client.delete(f"{unique_name}:lb:{serial}")
    await client.set(f"{unique_name}:lb:{serial}", "".join(lines))
    await client.hset(f"{unique_name}:cfg", "layout", "5")
    again = await open_redis(redis_url, unique_name, clock=clock, lease_timeout=10)
    try:
        assert await client.hget(f"{unique_name}:cfg", "layout") == b"6"
        await again.ack(leases[0])
        rest = await again.next_requests(17)
        assert [lease.request.priority for lease in rest] == [4] + [3] * 4 + [2] * 4 + [1] * 4 + [0] * 4
        assert [lease.request.url for lease in rest[:5]] == [
            "http://u19.test/", "http://u3.test/", "http://u8.test/", "http://u13.test/", "http://u18.test/"
        ]
        await again.ack_many(rest)
        await the_others_expire_and_come_back(again, clock, leases, acked=20)
    finally:
        await again.close()


async def test_a_layout_5_frontier_with_more_loose_requests_than_one_lua_call_takes_is_upgraded(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """INIT rewrites ``gq`` in parts: a part's members and scores are one Redis call from Lua, which
    takes at most 8,000 arguments -- a layout-5 frontier with thousands of loose requests is upgraded
    whole, every request read back in its order."""
    frontier = await open_redis(redis_url, unique_name, clock=FakeClock())
    try:
        await frontier.enqueue_requests(
            [Request(f"http://u{i % 100}.test/{i}", priority=i % 3) for i in range(4_500)]
        )
    finally:
        await frontier.close()
    key = f"{unique_name}:gq"
    loose = await gq_as_layout_5(client, key)
    assert len(loose) > 4_000  # more than one part of the upgrade
    await client.hset(f"{unique_name}:cfg", "layout", "5")
    again = await open_redis(redis_url, unique_name, clock=FakeClock())
    try:
        assert await client.hget(f"{unique_name}:cfg", "layout") == b"6"
        assert await client.zrange(key, 0, -1, withscores=True) == loose  # as layout 6 writes them
        urls = []
        while leases := await again.next_requests(500):
            urls += [lease.request.url for lease in leases]
            await again.ack_many(leases)
        assert len(urls) == len(set(urls)) == 4_500
        assert await again.idle()
    finally:
        await again.close()


async def test_one_lease_sent_twice_under_two_tokens_in_one_ack_is_settled_once(
    redis_url: str, unique_name: str
) -> None:
    """ACK reads each lease as its LEASE call and id; a second token for the same lease that differs only in
    its tail (the deadline) is that lease again in the same call: settled once, its host's count once, the
    second refused -- the other lease of the host stays out."""
    frontier = await open_redis(redis_url, unique_name, clock=FakeClock())
    try:
        await frontier.enqueue_requests([Request(f"http://same.test/{i}") for i in range(2)])
        first, second = await frontier.next_requests(2)
        again = first._replace(token=first.token.rsplit("@", 1)[0] + "@1")
        assert again.token != first.token
        with pytest.raises(LeaseError):
            await frontier.ack_many([first, again])
        stats = await frontier.stats()
        assert (stats.acked, stats.in_flight) == (1, 1)
        await frontier.ack(second)
        stats = await frontier.stats()
        assert (stats.acked, stats.in_flight) == (2, 0)
        assert await frontier.idle()
    finally:
        await frontier.close()
