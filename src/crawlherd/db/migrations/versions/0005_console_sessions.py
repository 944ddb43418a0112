"""The console safe off loopback: users get a role, logins become server-side sessions, and failed
logins are throttled.

Existing users become ``admin``: until now every login could change everything, so no one loses a
right they had; an admin then lowers the others' roles (``crawlherd users add NAME --role viewer`` or
the Users page).

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlherd.db.migrations._ops import TS, BigID

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.add_column("users", sa.Column("role", sa.String(10), nullable=False, server_default="admin"))
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", BigID, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("client", sa.String(100), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_seen_at", TS, nullable=False),
    )
    op.create_index("ix_console_sessions_user_id", "console_sessions", ["user_id"])
    op.create_table(
        "login_throttle",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", TS, nullable=False),
        sa.Column("blocked_until", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("login_throttle")
    op.drop_index("ix_console_sessions_user_id", table_name="console_sessions")
    op.drop_table("console_sessions")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("role")
