"""Sinks without a service: chosen by URL, named memory stores, what ``close`` releases."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from crawlherd.db import create_engine
from crawlherd.errors import ConfigurationError
from crawlherd.item import make_item
from crawlherd.sinks import MemorySink, SQLSink, open_sink

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown sink URL scheme 'kafka'.*memory://.*postgresql://.*sqlite://"):
        open_sink("kafka://localhost")


def test_urls_choose_the_backend(tmp_path: Path) -> None:
    assert isinstance(open_sink("memory://"), MemorySink)
    assert isinstance(open_sink(f"sqlite:///{tmp_path / 'x.db'}"), SQLSink)
    assert isinstance(open_sink("postgresql://user@127.0.0.1:1/db"), SQLSink)  # no connection until used


def test_the_memory_sink_takes_no_options() -> None:
    with pytest.raises(ConfigurationError, match="takes no options; got bogus"):
        open_sink("memory://", bogus=1)


async def test_memory_named_stores_are_shared_private_ones_are_not() -> None:
    a = make_item("shop", "https://shop.test/a", {"title": "A"})
    async with open_sink("memory://shared-sink") as one, open_sink("memory://shared-sink") as two:
        await one.upsert([a], website_id=1, target_id=None, seen_at=NOW)
        assert await two.get(a.fingerprint) is not None
    private = MemorySink()
    await private.upsert([a], website_id=1, target_id=None, seen_at=NOW)
    assert await MemorySink().count() == 0
    assert [r.url for r in private.records()] == ["https://shop.test/a"]


async def test_the_sql_sink_leaves_the_callers_engine_open(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    async with SQLSink(engine):
        pass
    async with engine.connect() as conn:  # still usable
        assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    await engine.dispose()


async def test_the_sql_sink_disposes_of_the_engine_it_opened(tmp_path: Path) -> None:
    sink = SQLSink.from_url(f"sqlite:///{tmp_path / 'x.db'}")
    async with sink:
        async with sink.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        assert sink.engine.pool.checkedin() == 1
    assert sink.engine.pool.checkedin() == 0


async def test_upsert_groups_of_any_sink_counts_each_group_in_order() -> None:
    from crawlherd.item import make_item

    sink = MemorySink()
    a = make_item("shop", "https://shop.test/a", {"title": "A"})
    counts = await sink.upsert_groups([([a], 1, None), ([a], 1, None)], seen_at=NOW)
    assert [(c.new, c.updated) for c in counts] == [(1, 0), (0, 0)]
