"""The outbox is bounded: rows the broker keeps refusing go ``dead``; published rows are pruned.

Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

from crawlherd.db.migrations._ops import create_partial_index

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("dispatch_outbox") as batch:
        batch.drop_constraint("ck_dispatch_outbox_status", type_="check")
        batch.create_check_constraint("ck_dispatch_outbox_status", "status IN ('pending', 'published', 'dead')")
    create_partial_index(
        "ix_dispatch_outbox_published", "dispatch_outbox", ["published_at"], where="status = 'published'"
    )


def downgrade() -> None:
    op.drop_index("ix_dispatch_outbox_published", table_name="dispatch_outbox")
    op.execute("DELETE FROM dispatch_outbox WHERE status = 'dead'")
    with op.batch_alter_table("dispatch_outbox") as batch:
        batch.drop_constraint("ck_dispatch_outbox_status", type_="check")
        batch.create_check_constraint("ck_dispatch_outbox_status", "status IN ('pending', 'published')")
