"""Honest job completion: ``job_details`` (the detail pages a run queued, until each is stored or failed)
and ``job_runs.listed_at`` (the running attempt's listing chain has ended; its detail pages may be out).

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlherd.db.migrations._ops import TS, target_slot_columns

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    with op.batch_alter_table("job_runs") as batch:
        batch.add_column(sa.Column("listed_at", TS, nullable=True))
    op.create_table(
        "job_details",
        *target_slot_columns(),
        sa.Column("item", sa.String(64), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("target_id", "slot_at", "item", name="uq_job_details_run_item"),
        sa.CheckConstraint("status IN ('out', 'stored', 'failed')", name="ck_job_details_status"),
    )
    op.create_index("ix_job_details_item_status", "job_details", ["item", "status"])


def downgrade() -> None:
    op.drop_index("ix_job_details_item_status", table_name="job_details")
    op.drop_table("job_details")
    with op.batch_alter_table("job_runs") as batch:
        batch.drop_column("listed_at")
