"""The config DB: models, engines (SQLite / PostgreSQL) and the packaged Alembic migrations.

Layout: ``engine.py`` (URL mapping, engine factory, database clock), ``models.py`` (tables),
``migrate.py`` (programmatic ``upgrade``), ``migrations/`` (the Alembic scripts, shipped in the wheel).
"""

from __future__ import annotations

from crawlherd.db.engine import async_database_url, create_engine, db_now, dialect_of
from crawlherd.db.migrate import current_revision, head_revision, upgrade
from crawlherd.db.models import Base, DispatchOutbox, JobRun, ScrapeTarget, StoredItem, Website

__all__ = [
    "Base", "DispatchOutbox", "JobRun", "ScrapeTarget", "StoredItem", "Website",
    "async_database_url", "create_engine", "current_revision", "db_now", "dialect_of", "head_revision", "upgrade",
]
