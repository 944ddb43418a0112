"""Run the Alembic migrations shipped in :mod:`crawlherd.db.migrations` programmatically (no
``alembic.ini`` needed); the same migrations serve SQLite and PostgreSQL.

Alembic is imported only to migrate: :func:`head_revision` reads the scripts' ``revision`` lines and
:func:`current_revision` the version table itself, so that a service checking the database at start-up
(``crawlherd dispatch --once`` from cron) does not import Alembic and every migration script."""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.engine import create_engine
from crawlherd.db.errors import translate_db_errors

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["alembic_config", "current_revision", "head_revision", "upgrade"]

VERSION_TABLE = "crawlherd_alembic_version"
_REVISION = re.compile(r"""^(down_)?revision\s*(?::[^=]*)?=\s*(?:None|["']([^"']+)["'])\s*$""", re.MULTILINE)


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migrations."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "crawlherd.db:migrations")
    return cfg


def head_revision() -> str:
    """The newest migration shipped with this crawlherd: the one revision no script follows, read from
    the scripts' ``revision`` / ``down_revision`` lines (Alembic's own answer when they are not that
    simple: a merge, a branch)."""
    revisions: set[str] = set()
    followed: set[str] = set()
    for script in resources.files("crawlherd.db.migrations").joinpath("versions").iterdir():
        if script.name.endswith(".py") and not script.name.startswith("_"):
            for down, revision in _REVISION.findall(script.read_text(encoding="utf-8")):
                (followed if down else revisions).add(revision)
    heads = revisions - followed - {""}
    if len(heads) == 1 and followed - {""} <= revisions:
        return heads.pop()
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def upgrade(engine_or_url: AsyncEngine | str, revision: str = "head") -> str:
    """Bring the config DB up to ``revision`` (default: the newest); returns the revision now current.
    A config DB already at the newest is left as it is without importing Alembic (``crawlherd run``
    upgrades at every start)."""
    engine = create_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url

    def _run(sync_conn: Connection) -> None:
        if revision == "head" and _revision_of(sync_conn) == head_revision():
            return
        from alembic import command

        cfg = alembic_config()
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
    with translate_db_errors("reading its migration", url=_shown(engine)):
        async with engine.connect() as conn:
            return await conn.run_sync(_revision_of)


def _revision_of(sync_conn: Connection) -> str | None:
    if not inspect(sync_conn).has_table(VERSION_TABLE):
        return None
    found = sync_conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(found) > 1:  # branches: Alembic says what is wrong
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(sync_conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
    return found[0] if found else None


def _shown(engine: AsyncEngine) -> str:
    """The URL as the user wrote it (``postgresql://``, not the driver's ``postgresql+asyncpg://``),
    the password hidden."""
    url = engine.url.set(drivername=engine.url.get_backend_name())
    return url.render_as_string(hide_password=True)
