"""The SQL sink's driver errors: the database unreachable is the config DB's outage (a typed
``BackendUnavailableError``, ``role="database"``); a broken constraint is not an outage."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawlherd.db import upgrade
from crawlherd.errors import BackendUnavailableError
from crawlherd.item import make_item
from crawlherd.sinks import SQLSink
from tests._netutil import free_port


async def test_an_unreachable_database_is_the_config_db_outage() -> None:
    sink = SQLSink.from_url(f"postgresql://u:pw@127.0.0.1:{free_port()}/db")
    try:
        for call in (sink.count, lambda: sink.get(b"12345678"), lambda: sink.upsert(
                [make_item("shop", "https://shop.test/1", {})], website_id=1, target_id=None,
                seen_at=datetime.now(UTC))):
            with pytest.raises(BackendUnavailableError) as info:
                await call()  # type: ignore[operator]
            assert info.value.role == "database" and info.value.backend == "database"
            assert "pw@" not in str(info.value)
    finally:
        await sink.close()


async def test_an_item_of_no_website_is_not_an_outage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'config.db'}"
    await upgrade(url)
    sink = SQLSink.from_url(url)
    try:
        with pytest.raises(Exception) as info:  # noqa: PT011 - the driver's own constraint error
            await sink.upsert([make_item("shop", "https://shop.test/1", {})], website_id=999, target_id=None,
                              seen_at=datetime.now(UTC))
        assert not isinstance(info.value, BackendUnavailableError), info.value
    finally:
        await sink.close()
