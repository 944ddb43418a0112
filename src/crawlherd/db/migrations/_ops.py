"""Operations the migrations share (Alembic's ``op`` with crawlherd's conventions)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

#: The column types every migration uses. Frozen: a change here would change what old migrations create.
BigID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def target_slot_columns() -> list[sa.Column[object]]:
    """The key of a row about one slot of one target (``TargetSlotRow`` in the models): id, target_id
    (deleted with its target), slot_at. New columns each call (a Column belongs to one table)."""
    return [
        sa.Column("id", BigID, primary_key=True),
        sa.Column("target_id", BigID, sa.ForeignKey("scrape_targets.id", ondelete="CASCADE"), nullable=False),
        sa.Column("slot_at", TS, nullable=False),
    ]


def create_partial_index(name: str, table: str, columns: list[str], *, where: str) -> None:
    """An index over the rows matching ``where`` only, on PostgreSQL and SQLite alike."""
    op.create_index(name, table, columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where))
