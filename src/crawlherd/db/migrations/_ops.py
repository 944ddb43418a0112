"""Operations the migrations share (Alembic's ``op`` with crawlherd's conventions)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def create_partial_index(name: str, table: str, columns: list[str], *, where: str) -> None:
    """An index over the rows matching ``where`` only, on PostgreSQL and SQLite alike."""
    op.create_index(name, table, columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where))
