"""Run the Alembic migrations shipped in :mod:`crawlherd.db.migrations` programmatically (no
``alembic.ini`` needed); the same migrations serve SQLite and PostgreSQL."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.engine import create_engine
from crawlherd.db.errors import translate_db_errors

__all__ = ["alembic_config", "current_revision", "head_revision", "upgrade"]

VERSION_TABLE = "crawlherd_alembic_version"


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", "crawlherd.db:migrations")
    return cfg


def head_revision() -> str:
    """The newest migration shipped with this crawlherd."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def upgrade(engine_or_url: AsyncEngine | str, revision: str = "head") -> str:
    """Bring the config DB up to ``revision`` (default: the newest); returns the revision now current."""
    engine = create_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    cfg = alembic_config()

    def _run(sync_conn: Connection) -> None:
        cfg.attributes["connection"] = sync_conn
        command.upgrade(cfg, revision)

    try:
        with translate_db_errors("migrating", url=_shown(engine)):
            async with engine.begin() as conn:
                await conn.run_sync(_run)
        return await current_revision(engine) or ""
    finally:
        if isinstance(engine_or_url, str):
            await engine.dispose()


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the config DB is at, or None when it was never migrated."""

    def _current(sync_conn: Connection) -> str | None:
        return MigrationContext.configure(sync_conn, opts={"version_table": VERSION_TABLE}).get_current_revision()

    with translate_db_errors("reading its migration", url=_shown(engine)):
        async with engine.connect() as conn:
            return await conn.run_sync(_current)


def _shown(engine: AsyncEngine) -> str:
    """The URL as the user wrote it (``postgresql://``, not the driver's ``postgresql+asyncpg://``),
    the password hidden."""
    url = engine.url.set(drivername=engine.url.get_backend_name())
    return url.render_as_string(hide_password=True)
