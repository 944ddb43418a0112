"""The sink contract: the same assertions for every sink -- the in-memory reference, and the SQL sink on
SQLite and on the real PostgreSQL of this machine (marked ``postgres``; skipped loudly when absent).

Each backend joins through the ``sink`` fixture: an entered sink opened by URL, with the websites and
the target the items refer to (the SQL sink's table has foreign keys; the memory sink ignores them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from crawlherd.db import create_engine, upgrade
from crawlherd.item import Item, make_item
from crawlherd.sinks import Sink, open_sink
from tests.support.db import add_targets, add_website

BACKENDS = ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Ids:
    """The website and target ids the items are stored under."""

    shop = 1
    other = 2
    target = 1


@pytest.fixture(params=BACKENDS)
def sink_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield f"memory://{request.getfixturevalue('unique_name')}"  # sinks on one name share their items
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'items.db'}"
    else:
        yield request.getfixturevalue("postgres_db_url")


@pytest.fixture
async def ids(sink_url: str) -> Ids:
    """The config DB the SQL sink writes to: migrated, with two websites and one target."""
    found = Ids()
    if sink_url.startswith("memory"):
        return found
    engine = create_engine(sink_url)
    try:
        await upgrade(engine)
        found.shop = await add_website(engine, "shop")
        found.other = await add_website(engine, "other")
        (found.target,) = await add_targets(engine, found.shop, 1, every=timedelta(hours=1))
    finally:
        await engine.dispose()
    return found


@pytest.fixture
async def sink(sink_url: str, ids: Ids) -> AsyncIterator[Sink]:
    async with open_sink(sink_url) as opened:
        yield opened
    await opened.close()  # idempotent


def item(url: str, **fields: object) -> Item:
    return make_item("shop", url, fields)


async def test_new_items_are_counted_and_stored(sink: Sink, ids: Ids) -> None:
    a, b = item("https://shop.test/a", title="A", price="1"), item("https://shop.test/b", title="B")
    counts = await sink.upsert([a, b], website_id=ids.shop, target_id=ids.target, seen_at=T0)
    assert (counts.new, counts.updated) == (2, 0)
    assert await sink.count() == 2
    stored = await sink.get(a.fingerprint)
    assert stored is not None
    assert stored.fingerprint == a.fingerprint
    assert stored.url == "https://shop.test/a"
    assert dict(stored.fields) == {"title": "A", "price": "1"}
    assert (stored.website_id, stored.target_id) == (ids.shop, ids.target)
    assert (stored.first_seen, stored.last_seen) == (T0, T0)


async def test_an_unknown_fingerprint_is_none(sink: Sink) -> None:
    assert await sink.get(b"\x00" * 8) is None
    assert await sink.count() == 0


async def test_duplicates_in_one_upsert_count_once_and_the_last_wins(sink: Sink, ids: Ids) -> None:
    first, last = item("https://shop.test/a", title="old"), item("https://shop.test/a", title="new")
    counts = await sink.upsert([first, item("https://shop.test/b"), last], website_id=ids.shop,
                               target_id=None, seen_at=T0)
    assert (counts.new, counts.updated) == (2, 0)
    assert await sink.count() == 2
    stored = await sink.get(first.fingerprint)
    assert stored is not None
    assert dict(stored.fields) == {"title": "new"}


async def test_the_same_item_again_is_neither_new_nor_updated_but_seen(sink: Sink, ids: Ids) -> None:
    a = item("https://shop.test/a", title="A")
    await sink.upsert([a], website_id=ids.shop, target_id=None, seen_at=T0)
    later = T0 + timedelta(hours=1)
    counts = await sink.upsert([a], website_id=ids.shop, target_id=None, seen_at=later)
    assert (counts.new, counts.updated) == (0, 0)
    stored = await sink.get(a.fingerprint)
    assert stored is not None
    assert (stored.first_seen, stored.last_seen) == (T0, later)
    assert await sink.count() == 1


async def test_fields_merge_over_the_stored_ones(sink: Sink, ids: Ids) -> None:
    url = "https://shop.test/a"
    await sink.upsert([item(url, title="A", price="1")], website_id=ids.shop, target_id=None, seen_at=T0)
    counts = await sink.upsert([item(url, price="2", stock="3")], website_id=ids.shop, target_id=None,
                               seen_at=T0)
    assert (counts.new, counts.updated) == (0, 1)
    stored = await sink.get(item(url).fingerprint)
    assert stored is not None
    assert dict(stored.fields) == {"title": "A", "price": "2", "stock": "3"}


async def test_a_subset_of_the_stored_fields_is_not_an_update(sink: Sink, ids: Ids) -> None:
    url = "https://shop.test/a"
    await sink.upsert([item(url, title="A", price="1")], website_id=ids.shop, target_id=None, seen_at=T0)
    counts = await sink.upsert([item(url, price="1")], website_id=ids.shop, target_id=None, seen_at=T0)
    assert (counts.new, counts.updated) == (0, 0)
    stored = await sink.get(item(url).fingerprint)
    assert stored is not None
    assert dict(stored.fields) == {"title": "A", "price": "1"}


async def test_json_values_round_trip(sink: Sink, ids: Ids) -> None:
    fields = {"tags": ["a", "b"], "price": {"amount": 9.5, "currency": "EUR"}, "stock": 3, "sale": None}
    a = make_item("shop", "https://shop.test/a", fields)
    await sink.upsert([a], website_id=ids.shop, target_id=None, seen_at=T0)
    stored = await sink.get(a.fingerprint)
    assert stored is not None
    assert dict(stored.fields) == fields


async def test_the_first_source_and_seen_time_stay_the_url_follows(sink: Sink, ids: Ids) -> None:
    a = item("https://shop.test/a", title="A")
    await sink.upsert([a], website_id=ids.shop, target_id=ids.target, seen_at=T0)
    moved = Item(website="shop", url="https://shop.test/a?moved", fingerprint=a.fingerprint, fields={"title": "A"})
    later = T0 + timedelta(days=1)
    await sink.upsert([moved], website_id=ids.other, target_id=None, seen_at=later)
    stored = await sink.get(a.fingerprint)
    assert stored is not None
    assert (stored.website_id, stored.target_id) == (ids.shop, ids.target)
    assert stored.url == "https://shop.test/a?moved"
    assert (stored.first_seen, stored.last_seen) == (T0, later)


async def test_an_empty_upsert_does_nothing(sink: Sink, ids: Ids) -> None:
    counts = await sink.upsert([], website_id=ids.shop, target_id=None, seen_at=T0)
    assert (counts.new, counts.updated) == (0, 0)
    assert await sink.count() == 0


async def test_a_naive_seen_at_is_refused(sink: Sink, ids: Ids) -> None:
    with pytest.raises(ValueError, match="timezone"):
        await sink.upsert([item("https://shop.test/a")], website_id=ids.shop, target_id=None,
                          seen_at=datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test
    assert await sink.count() == 0


async def test_many_items_in_one_upsert(sink: Sink, ids: Ids) -> None:
    items = [item(f"https://shop.test/{i}", n=i) for i in range(1200)]  # more than one SQL batch
    counts = await sink.upsert(items, website_id=ids.shop, target_id=None, seen_at=T0)
    assert (counts.new, counts.updated) == (1200, 0)
    assert await sink.count() == 1200
    stored = await sink.get(items[1100].fingerprint)
    assert stored is not None
    assert dict(stored.fields) == {"n": 1100}


async def test_concurrent_upserts_of_one_item_keep_every_field(sink_url: str, ids: Ids) -> None:
    """Two writers (two sink objects, as two workers) store fields of one item at once: none is lost."""
    url = "https://shop.test/x"
    async with open_sink(sink_url) as one, open_sink(sink_url) as two:
        await one.upsert([item(url, title="X")], website_id=ids.shop, target_id=None, seen_at=T0)
        await asyncio.gather(
            *(
                (one if i % 2 else two).upsert([item(url, **{f"f{i}": i})], website_id=ids.shop, target_id=None,
                                               seen_at=T0)
                for i in range(10)
            )
        )
        stored = await one.get(item(url).fingerprint)
    assert stored is not None
    assert dict(stored.fields) == {"title": "X", **{f"f{i}": i for i in range(10)}}


async def test_writers_storing_the_same_items_in_opposite_orders_do_not_deadlock(sink_url: str, ids: Ids) -> None:
    """Two workers whose searches overlap store the same items in different orders at once. Each upsert
    locks its rows in the order it writes them: unless every writer writes them in one order, PostgreSQL
    finds a deadlock and fails one write (its pages fetched again). And each item is counted new (or
    updated) by one of them, not by both."""
    items = [item(f"https://shop.test/{i}", n=i) for i in range(300)]
    async with open_sink(sink_url) as one, open_sink(sink_url) as two:
        for round_ in range(4):
            seen = T0 + timedelta(minutes=round_)
            batch = items if round_ < 2 else [item(i.url, n=i.fields["n"], round=round_) for i in items]
            first, second = await asyncio.gather(  # neither fails
                one.upsert(batch, website_id=ids.shop, target_id=None, seen_at=seen),
                two.upsert(batch[::-1], website_id=ids.shop, target_id=None, seen_at=seen),
            )
            # and one item stored by both at once is new (or updated) once: the counts stay exact
            assert (first.new + second.new, first.updated + second.updated) == [
                (300, 0), (0, 0), (0, 300), (0, 300)][round_], (round_, first, second)
        assert await one.count() == 300
        stored = await two.get(items[7].fingerprint)
        assert stored is not None and dict(stored.fields) == {"n": 7, "round": 3}
