"""What the ``sqlite://`` frontier does beyond the contract suite: persistence across reopen,
one owner at a time, bad records moved aside, and its URL and options."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from crawlherd.clock import FakeClock
from crawlherd.errors import BackendUnavailableError, ConfigurationError
from crawlherd.frontier import open_scheduler
from crawlherd.frontier.sqlite import SQLiteFrontier
from crawlherd.request import Request


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


async def test_everything_survives_a_reopen(tmp_path: Path) -> None:
    clock = FakeClock()
    db = tmp_path / "f.db"
    async with open_scheduler(url_of(db), clock=clock, delay=0) as f:
        for i, prio in enumerate([1, 5, 5, 0]):
            assert await f.enqueue_request(Request(f"http://h{i}.test/{i}", priority=prio, meta={"i": i}))
        await f.enqueue_request(Request("http://later.test/", not_before=clock.now() + 50))
        leased = await f.next_request()  # h1 (priority 5, first)
        assert leased is not None and leased.request.url == "http://h1.test/1"
        again = await f.next_request()  # h2
        assert again is not None
        await f.retry(again, delay=10)
        await f.set_host_policy("h0.test", delay=7.0)
        await f.block_host("h3.test", clock.now() + 100)
        before = await f.stats()
    async with open_scheduler(url_of(db), clock=clock) as f:
        stats = await f.stats()
        assert stats.enqueued == before.enqueued == 5
        assert stats.retries == 1
        assert stats.expired_leases == 1  # the lease left open came back at open
        assert stats.in_flight == 0 and stats.queued == 5
        # the duplicate filter still refuses everything seen
        for i in range(4):
            assert not await f.enqueue_request(Request(f"http://h{i}.test/{i}"))
        got = []
        while (lease := await f.next_request()) is not None:
            got.append(lease.request.url)
            await f.ack(lease)
        # h1 came back (priority 5); h0 next; h2 waits for its retry delay, h3 is blocked, later waits
        assert got == ["http://h1.test/1", "http://h0.test/0"]
        clock.advance(10)
        assert [lease.request.url for lease in await f.next_requests(5)] == ["http://h2.test/2"]
        clock.advance(40)
        later = await f.next_request()
        assert later is not None and later.request.url == "http://later.test/"
        assert later.request.meta == {}
        clock.advance(50)
        blocked = await f.next_request()
        assert blocked is not None and blocked.request.meta == {"i": 3}


async def test_robots_pending_state_survives_a_reopen(tmp_path: Path) -> None:
    clock = FakeClock()
    db = tmp_path / "f.db"
    robots = Request("http://r.test/robots.txt", meta={"robots_txt": True})
    async with open_scheduler(url_of(db), clock=clock, delay=0) as f:
        await f.enqueue_request(Request("http://r.test/page", priority=5))
        assert await f.enqueue_robots(robots)
        lease = await f.next_request()  # robots.txt, left leased: the process "dies"
        assert lease is not None and lease.request.url == "http://r.test/robots.txt"
        await f.enqueue_robots(Request("http://done.test/robots.txt"))
        done = await f.next_request()
        assert done is not None and done.request.url == "http://done.test/robots.txt"
        await f.ack(done)
    async with open_scheduler(url_of(db), clock=clock, delay=0) as f:
        assert not await f.enqueue_robots(robots)  # once per host, across the reopen
        assert not await f.enqueue_robots(Request("http://done.test/robots.txt"))
        again = await f.next_request()  # the lease came back at open, still first
        assert again is not None and again.request.url == "http://r.test/robots.txt"
        assert again.request.meta == {"robots_txt": True}
        assert await f.next_request() is None  # the page is still held
        await f.retry(again, delay=20)
    async with open_scheduler(url_of(db), clock=clock, delay=0) as f:
        assert await f.next_request() is None  # a retried robots request keeps its delay, and its host held
        clock.advance(20)
        third = await f.next_request()
        assert third is not None and third.request.url == "http://r.test/robots.txt"
        await f.ack(third)
        page = await f.next_request()
        assert page is not None and page.request.url == "http://r.test/page"


async def test_host_policy_and_ready_time_are_persisted(tmp_path: Path) -> None:
    clock = FakeClock()
    db = tmp_path / "f.db"
    async with open_scheduler(url_of(db), clock=clock) as f:
        await f.set_host_policy("slow.test", delay=30.0)
        for i in range(3):
            await f.enqueue_request(Request(f"http://slow.test/{i}"))
        lease = await f.next_request()
        assert lease is not None
        await f.ack(lease)
    async with open_scheduler(url_of(db), clock=clock) as f:
        assert await f.next_request() is None  # still 30 s to wait, across the reopen
        clock.advance(30)
        assert await f.next_request() is not None
        assert await f.next_request() is None  # the policy came back too


async def test_crash_without_close_keeps_the_dupefilter_log(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    f = SQLiteFrontier.from_url(url_of(db), snapshot_every=4, clock=FakeClock())
    await f.__aenter__()
    assert await f.enqueue_requests(Request(f"http://c.test/{i}") for i in range(10)) == 10
    # what kill -9 leaves: no close, no final snapshot (the lock goes with the process)
    assert f._db is not None and f._lock_file is not None
    f._db.close()
    f._lock_file.close()
    async with open_scheduler(url_of(db), clock=FakeClock()) as again:
        assert await again.size() == 10
        assert await again.enqueue_requests(Request(f"http://c.test/{i}") for i in range(12)) == 2


async def test_one_owner_at_a_time(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    async with open_scheduler(url_of(db)):
        with pytest.raises(BackendUnavailableError, match="open in another"):
            async with open_scheduler(url_of(db)):
                pass
    async with open_scheduler(url_of(db)):  # released at close
        pass


async def test_bad_record_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "f.db"
    async with open_scheduler(url_of(db)) as f:
        await f.enqueue_request(Request("http://a.test/"))
        await f.enqueue_request(Request("http://b.test/"))
        with sqlite3.connect(db) as con:
            con.execute("UPDATE requests SET record = ? WHERE host = 'a.test'", ('{"v": 42}',))
        leases = await f.next_requests(5)
        assert [lease.request.url for lease in leases] == ["http://b.test/"]
        assert isinstance(f, SQLiteFrontier)
        bad = await f.bad_entries()
        assert len(bad) == 1 and "version-1" in next(iter(bad.values()))
        assert "moved request" in caplog.text
        await f.ack(leases[0])
        assert await f.idle()


async def test_bloom_filter_persists_and_its_kind_is_fixed(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    async with open_scheduler(url_of(db), dupefilter="bloom", capacity=100) as f:
        assert await f.enqueue_requests(Request(f"http://b.test/{i}") for i in range(50)) == 50
    async with open_scheduler(url_of(db), dupefilter="bloom", capacity=100) as f:
        assert await f.enqueue_requests(Request(f"http://b.test/{i}") for i in range(50)) == 0
    with pytest.raises(ConfigurationError, match="dupefilter='bloom'"):
        async with open_scheduler(url_of(db)):
            pass


async def test_purge_empties_everything(tmp_path: Path) -> None:
    async with open_scheduler(url_of(tmp_path / "f.db")) as f:
        assert isinstance(f, SQLiteFrontier)
        await f.enqueue_request(Request("http://p.test/"))
        assert await f.purge() == 1
        assert await f.idle()
        assert await f.enqueue_request(Request("http://p.test/"))  # the filter was emptied too


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("sqlite:///:memory:", {}, "needs a file"),
        ("sqlite://host/x.db", {}, "needs a file"),
        ("sqlite:///x.db", {"synchronous": "off"}, "synchronous"),
        ("sqlite:///x.db?snapshot_every=0", {}, "snapshot_every"),
        ("sqlite:///x.db?nonsense=1", {}, "unknown frontier option"),
    ],
)
def test_bad_urls_and_options(url: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_scheduler(url, **options)


async def test_wal_mode(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    async with open_scheduler(url_of(db)) as f:
        await f.enqueue_request(Request("http://w.test/"))
        with sqlite3.connect(db) as con:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_works_without_async_with(tmp_path: Path) -> None:
    """The crawler opens its frontier with open_scheduler() and closes it, without ``async with``: the
    first call, a batch enqueue, opens the file (it once failed on the duplicate filter not loaded)."""
    f = open_scheduler(url_of(tmp_path / "f.db"), delay=0)
    try:
        assert await f.enqueue_requests([Request("http://a.test/1"), Request("http://a.test/1")]) == 1
        lease = await f.wait_next(timeout=0)
        assert lease is not None and lease.request.url == "http://a.test/1"
        await f.ack(lease)
        assert await f.idle()
    finally:
        await f.close()


async def test_the_leases_of_one_turn_share_a_transaction_and_a_cancelled_caller_gives_its_back(
    tmp_path: Path,
) -> None:
    async with open_scheduler(url_of(tmp_path / "f.db"), max_in_flight=10) as f:
        assert isinstance(f, SQLiteFrontier)
        await f.enqueue_requests(Request(f"http://a.test/{i}") for i in range(3))
        callers = [asyncio.create_task(f.next_request()) for _ in range(2)]
        await asyncio.sleep(0)  # both wait for this turn's leases
        f._lease_turn()  # the turn's transaction: both leases made, neither caller resumed yet
        callers[1].cancel()
        first = await callers[0]
        with pytest.raises(asyncio.CancelledError):
            await callers[1]
        for _ in range(5):
            await asyncio.sleep(0)  # the cancelled caller's lease goes back, not after lease_timeout
        assert first is not None
        urls = {first.request.url}
        while (lease := await f.next_request()) is not None:
            urls.add(lease.request.url)
        assert urls == {f"http://a.test/{i}" for i in range(3)}


async def test_a_cancelled_callers_lease_the_file_cannot_take_back_goes_back_once_it_can(tmp_path: Path) -> None:
    """The lease a cancelled caller leaves is put back with back-off while the file takes no write (here
    ``PRAGMA query_only``, as a full disk), not once and then left to ``lease_timeout``."""
    async with open_scheduler(url_of(tmp_path / "f.db"), max_in_flight=10) as f:
        assert isinstance(f, SQLiteFrontier)
        await f.enqueue_requests(Request(f"http://a.test/{i}") for i in range(2))
        callers = [asyncio.create_task(f.next_request()) for _ in range(2)]
        await asyncio.sleep(0)
        f._lease_turn()  # both leases made, neither caller resumed yet
        f._open().execute("PRAGMA query_only = ON")
        callers[1].cancel()
        first = await callers[0]
        with pytest.raises(asyncio.CancelledError):
            await callers[1]
        await asyncio.sleep(0.3)  # a few tries of the give-back, each refused
        assert first is not None and (await f.stats()).in_flight == 2
        f._open().execute("PRAGMA query_only = OFF")
        assert f._givebacks  # still trying
        async with asyncio.timeout(10):  # the next try takes it (within 2 s: its back-off's cap)
            await asyncio.wait(set(f._givebacks))
        assert (await f.stats()).in_flight == 1
        second = await f.next_request()
        assert second is not None and {first.request.url, second.request.url} == {"http://a.test/0", "http://a.test/1"}


def _cap_the_file(f: SQLiteFrontier, extra_pages: int) -> None:
    """SQLite's own limit on the file's size (``PRAGMA max_page_count``, on the frontier's connection):
    a write that needs more than ``extra_pages`` new pages fails with SQLITE_FULL, as on a full disk."""
    db = f._open()
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + extra_pages}")


async def test_a_lease_transaction_that_fails_loses_no_request(tmp_path: Path) -> None:
    """A full disk fails the transaction that records a batch of leases: the requests it took from the
    queue go back to it (they were once lost in memory until the file was reopened)."""
    async with open_scheduler(url_of(tmp_path / "f.db"), delay=0, max_in_flight=1000) as f:
        assert isinstance(f, SQLiteFrontier)
        urls = {f"http://h{i % 50}.test/{i}" for i in range(2000)}
        assert await f.enqueue_requests(Request(u) for u in sorted(urls)) == 2000
        _cap_the_file(f, 0)
        with pytest.raises(BackendUnavailableError, match="full"):
            await f.next_requests(1000)
        stats = await f.stats()
        assert stats.in_flight == 0 and stats.queued == 2000
        _cap_the_file(f, 10_000)  # the disk freed
        got: set[str] = set()
        while leases := await f.next_requests(500):
            got.update(lease.request.url for lease in leases)
            await f.ack_many(leases)
        assert got == urls
        assert (await f.stats()).acked == 2000


async def test_an_enqueue_whose_snapshot_fails_is_queued_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The duplicate filter's snapshot (written after an enqueue's transaction committed) fails on a full
    disk: the enqueue stands -- its requests are queued and leased, its counters saved once -- and the
    snapshot is written later (here: at close)."""
    db = tmp_path / "f.db"
    async with open_scheduler(url_of(db), delay=0, max_in_flight=10_000, snapshot_every=5000) as f:
        assert isinstance(f, SQLiteFrontier)
        assert await f.enqueue_requests(Request(f"http://a.test/{i}") for i in range(4999)) == 4999
        _cap_the_file(f, 10)  # room for one request's rows, not for a snapshot of 5,000 fingerprints
        with caplog.at_level("WARNING", logger="crawlherd.frontier"):
            assert await f.enqueue_request(Request("http://a.test/last"))
        assert "the duplicate filter's snapshot is written later" in caplog.text
        _cap_the_file(f, 10_000)  # the disk freed
        got = []
        while leases := await f.next_requests(1000):
            got += leases
        assert len(got) == 5000 and "http://a.test/last" in {lease.request.url for lease in got}
        await f.ack_many(got)
        assert (await f.stats()).enqueued == 5000
    async with open_scheduler(url_of(db)) as f:
        stats = await f.stats()
        assert stats.enqueued == stats.acked == 5000
        assert not await f.enqueue_request(Request("http://a.test/last"))


async def test_a_failed_lease_transaction_that_took_back_expired_leases_leaves_them_leasable(tmp_path: Path) -> None:
    """The failed transaction had also taken back expired leases: in memory they are queued again, in the
    file their lease rows are still there (rolled back). Leasing them again replaces those rows."""
    clock = FakeClock()
    async with open_scheduler(url_of(tmp_path / "f.db"), clock=clock, delay=0, lease_timeout=10,
                              max_in_flight=10_000) as f:
        assert isinstance(f, SQLiteFrontier)
        urls = {f"http://h{i % 5}.test/{i}" for i in range(600)}
        await f.enqueue_requests(Request(u) for u in sorted(urls))
        assert len(await f.next_requests(600)) == 600
        clock.advance(11)  # every lease expired
        # and requests never leased: the failing transaction's 2,000 new lease rows need new pages (the
        # expired ones' rows alone may fit in the file's slack)
        fresh = {f"http://h{i % 5}.test/fresh/{i}" for i in range(2000)}
        await f.enqueue_requests(Request(u) for u in sorted(fresh))
        _cap_the_file(f, 0)
        with pytest.raises(BackendUnavailableError, match="full"):
            await f.next_requests(2600)
        _cap_the_file(f, 10_000)
        got: set[str] = set()
        while leases := await f.next_requests(500):
            got.update(lease.request.url for lease in leases)
            await f.ack_many(leases)
        assert got == urls | fresh
        stats = await f.stats()
        assert stats.expired_leases == 600 and stats.acked == 2600  # each counted once, failure or not
