"""The operator's console: users, audit_log, process_heartbeats, manual_runs, outbox_trail,
job_attempts, discarded_runs, and the indexes its pages need on job_runs, dispatch_outbox and items.

Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlherd.db.migrations._ops import TS, BigID, target_slot_columns

revision = "0004"
down_revision = "0003"



def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", BigID, primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_login_at", TS, nullable=True),
        sa.UniqueConstraint("name", name="uq_users_name"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", BigID, primary_key=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("actor", sa.String(100), nullable=False),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_table(
        "process_heartbeats",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(50), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.Column("stopped_at", TS, nullable=True),
        sa.Column("interval_seconds", sa.Float(), nullable=False),
        sa.Column("jobs_in_hand", sa.Integer(), nullable=False),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.CheckConstraint("kind IN ('dispatcher', 'worker', 'web')", name="ck_process_heartbeats_kind"),
    )
    op.create_index("ix_process_heartbeats_last_seen", "process_heartbeats", ["last_seen"])
    op.create_table(
        "manual_runs",
        *target_slot_columns(),
        sa.Column("request_key", sa.String(100), nullable=False),
        sa.Column("requested_by", sa.String(100), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.UniqueConstraint("request_key", name="uq_manual_runs_request_key"),
    )
    op.create_index("ix_manual_runs_target", "manual_runs", ["target_id", "slot_at"])
    op.create_table(
        "outbox_trail",
        sa.Column(
            "outbox_id", BigID, sa.ForeignKey("dispatch_outbox.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("claimed_by", sa.String(200), nullable=False),
        sa.Column("published_by", sa.String(200), nullable=True),
        sa.Column("broker", sa.String(300), nullable=True),
    )
    op.create_table(
        "job_attempts",
        *target_slot_columns(),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(200), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("items_new", sa.Integer(), nullable=False),
        sa.Column("items_updated", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.UniqueConstraint("target_id", "slot_at", "attempt", name="uq_job_attempts_attempt"),
    )
    op.create_index("ix_job_attempts_started_at", "job_attempts", ["started_at"])
    op.create_table(
        "discarded_runs",
        sa.Column("run_id", BigID, sa.ForeignKey("job_runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("discarded_by", sa.String(100), nullable=False),
        sa.Column("discarded_at", TS, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
    )
    op.create_index("ix_job_runs_status_id", "job_runs", ["status", "id"])
    op.create_index("ix_job_runs_updated_at", "job_runs", ["updated_at", "status"])
    op.create_index("ix_dispatch_outbox_created_at", "dispatch_outbox", ["created_at"])
    op.create_index("ix_items_first_seen", "items", ["first_seen"])
    op.create_index("ix_items_last_seen", "items", ["last_seen"])


def downgrade() -> None:
    for index, table in (
        ("ix_items_last_seen", "items"),
        ("ix_items_first_seen", "items"),
        ("ix_dispatch_outbox_created_at", "dispatch_outbox"),
        ("ix_job_runs_updated_at", "job_runs"),
        ("ix_job_runs_status_id", "job_runs"),
    ):
        op.drop_index(index, table_name=table)
    op.drop_table("discarded_runs")
    op.drop_table("job_attempts")
    op.drop_table("outbox_trail")
    op.drop_index("ix_manual_runs_target", table_name="manual_runs")
    op.drop_table("manual_runs")
    op.drop_index("ix_process_heartbeats_last_seen", table_name="process_heartbeats")
    op.drop_table("process_heartbeats")
    op.drop_index("ix_audit_log_at", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("users")
