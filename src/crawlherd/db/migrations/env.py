"""Alembic environment: always run programmatically by :func:`crawlherd.db.migrate.upgrade`, which
hands over a live connection in ``config.attributes["connection"]``."""

from __future__ import annotations

from alembic import context

from crawlherd.db.models import Base

VERSION_TABLE = "crawlherd_alembic_version"

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reachable through the alembic CLI
    raise RuntimeError("run the crawlherd migrations with `crawlherd db upgrade`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
