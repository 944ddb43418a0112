"""The config DB: websites, scrape_targets, dispatch_outbox, job_runs, items.

Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawlherd.db.migrations._ops import TS, BigID, create_partial_index, target_slot_columns

revision = "0001"
down_revision = None



def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "websites",
        sa.Column("id", BigID, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("search_url_template", sa.Text(), nullable=False),
        sa.Column("requires_playwright", sa.Boolean(), nullable=False),
        sa.Column("pagination_type", sa.String(20), nullable=False),
        sa.Column("pagination", sa.JSON(), nullable=False),
        sa.Column("extraction", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("min_delay", sa.Float(), nullable=False),
        sa.Column("max_concurrency", sa.Integer(), nullable=False),
        sa.Column("robots_policy", sa.String(10), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("name", name="uq_websites_name"),
        sa.CheckConstraint(
            _in("pagination_type", ("none", "next_link", "page_param")), name="ck_websites_pagination_type"
        ),
        sa.CheckConstraint(_in("robots_policy", ("obey", "ignore")), name="ck_websites_robots_policy"),
    )
    op.create_table(
        "scrape_targets",
        sa.Column("id", BigID, primary_key=True),
        sa.Column("website_id", BigID, sa.ForeignKey("websites.id", ondelete="CASCADE"), nullable=False),
        sa.Column("keywords", sa.Text(), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("schedule_kind", sa.String(10), nullable=False),
        sa.Column("interval_seconds", sa.Float(), nullable=True),
        sa.Column("cron", sa.String(200), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("anchor_at", TS, nullable=True),
        sa.Column("jitter_ms", sa.BigInteger(), nullable=False),
        sa.Column("misfire_policy", sa.String(10), nullable=False),
        sa.Column("backfill_limit", sa.Integer(), nullable=False),
        sa.Column("misfire_grace_seconds", sa.Float(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("last_scheduled", TS, nullable=True),
        sa.Column("next_run_at", TS, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("website_id", "keywords", "location", name="uq_scrape_targets_combo"),
        sa.CheckConstraint(_in("schedule_kind", ("interval", "cron")), name="ck_scrape_targets_schedule_kind"),
        sa.CheckConstraint(
            _in("misfire_policy", ("skip", "latest", "backfill")), name="ck_scrape_targets_misfire_policy"
        ),
    )
    op.create_index("ix_scrape_targets_website_id", "scrape_targets", ["website_id"])
    create_partial_index("ix_scrape_targets_due", "scrape_targets", ["next_run_at"], where="active")
    op.create_table(
        "dispatch_outbox",
        *target_slot_columns(),
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("leased_until", TS, nullable=True),
        sa.Column("lease_owner", sa.String(100), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("published_at", TS, nullable=True),
        sa.UniqueConstraint("target_id", "slot_at", name="uq_dispatch_outbox_target_slot"),
        sa.CheckConstraint(_in("status", ("pending", "published")), name="ck_dispatch_outbox_status"),
    )
    create_partial_index(
        "ix_dispatch_outbox_pending", "dispatch_outbox", ["leased_until", "id"], where="status = 'pending'"
    )
    op.create_table(
        "job_runs",
        *target_slot_columns(),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("items_new", sa.Integer(), nullable=False),
        sa.Column("items_updated", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("target_id", "slot_at", name="uq_job_runs_target_slot"),
        sa.CheckConstraint(
            _in("status", ("queued", "running", "succeeded", "failed", "dead")), name="ck_job_runs_status"
        ),
    )
    op.create_table(
        "items",
        sa.Column("id", BigID, primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("website_id", BigID, sa.ForeignKey("websites.id", ondelete="CASCADE"), nullable=False),
        sa.Column("target_id", BigID, sa.ForeignKey("scrape_targets.id", ondelete="SET NULL"), nullable=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.UniqueConstraint("fingerprint", name="uq_items_fingerprint"),
    )
    op.create_index("ix_items_website_id", "items", ["website_id"])
    op.create_index("ix_items_target_id", "items", ["target_id"])


def downgrade() -> None:
    op.drop_table("items")
    op.drop_table("job_runs")
    op.drop_index("ix_dispatch_outbox_pending", table_name="dispatch_outbox")
    op.drop_table("dispatch_outbox")
    op.drop_index("ix_scrape_targets_due", table_name="scrape_targets")
    op.drop_index("ix_scrape_targets_website_id", table_name="scrape_targets")
    op.drop_table("scrape_targets")
    op.drop_table("websites")
