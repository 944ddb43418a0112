"""The revisions crawlherd reads without Alembic (at every service's start) agree with Alembic's."""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory

from crawlherd.db import create_engine, current_revision, head_revision, upgrade
from crawlherd.db.migrate import alembic_config


def test_head_revision_is_alembics_head() -> None:
    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


async def test_current_revision_of_a_new_an_older_and_a_migrated_database(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'config.db'}")
    try:
        assert await current_revision(engine) is None
        assert await upgrade(engine, "0002") == "0002" == await current_revision(engine)
        assert await upgrade(engine) == head_revision() == await current_revision(engine)
    finally:
        await engine.dispose()
