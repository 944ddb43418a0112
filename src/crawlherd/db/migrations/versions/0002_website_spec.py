"""websites.spec: a website's whole configuration (a SiteSpec, as JSON) replaces its flattened columns.

The columns ``base_url``, ``search_url_template``, ``requires_playwright``, ``pagination_type``,
``pagination``, ``extraction``, ``metadata``, ``min_delay``, ``max_concurrency`` and ``robots_policy``
are folded into ``spec`` (the revisit age, kept until now as ``metadata.revisit_age_seconds``, becomes
``spec.revisit_age``); the downgrade unfolds them again.

Create Date: 2026-11-24
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

_DAY = 86_400.0
_FLAT: tuple[tuple[str, Any], ...] = (
    ("base_url", sa.Text()),
    ("search_url_template", sa.Text()),
    ("requires_playwright", sa.Boolean()),
    ("pagination_type", sa.String(20)),
    ("pagination", sa.JSON()),
    ("extraction", sa.JSON()),
    ("metadata", sa.JSON()),
    ("min_delay", sa.Float()),
    ("max_concurrency", sa.Integer()),
    ("robots_policy", sa.String(10)),
)


def _websites(*columns: tuple[str, Any]) -> sa.TableClause:
    return sa.table("websites", sa.column("id", sa.BigInteger()), *(sa.column(name, kind) for name, kind in columns))


def _fold(row: Any) -> dict[str, Any]:
    metadata = dict(row.metadata or {})
    revisit = metadata.pop("revisit_age_seconds", _DAY)
    return {
        "name": row.name,
        "base_url": row.base_url,
        "search_url_template": row.search_url_template,
        "requires_playwright": bool(row.requires_playwright),
        "pagination": {"type": row.pagination_type, **{k: v for k, v in (row.pagination or {}).items() if k != "type"}},
        "extraction": row.extraction or {},
        "politeness": {
            "min_delay": row.min_delay,
            "max_concurrency": row.max_concurrency,
            "robots": row.robots_policy,
        },
        "revisit_age": float(revisit),
        "metadata": metadata,
    }


def _unfold(spec: dict[str, Any]) -> dict[str, Any]:
    pagination = dict(spec.get("pagination") or {})
    politeness = spec.get("politeness") or {}
    metadata = dict(spec.get("metadata") or {})
    revisit = spec.get("revisit_age", _DAY)
    if revisit != _DAY:
        metadata["revisit_age_seconds"] = revisit
    return {
        "base_url": spec["base_url"],
        "search_url_template": spec["search_url_template"],
        "requires_playwright": bool(spec.get("requires_playwright", False)),
        "pagination_type": pagination.pop("type", "none"),
        "pagination": pagination,
        "extraction": spec.get("extraction") or {},
        "metadata": metadata,
        "min_delay": float(politeness.get("min_delay", 1.0)),
        "max_concurrency": int(politeness.get("max_concurrency", 2)),
        "robots_policy": politeness.get("robots", "obey"),
    }


def upgrade() -> None:
    op.add_column("websites", sa.Column("spec", sa.JSON(), nullable=True))
    bind = op.get_bind()
    flat = _websites(("name", sa.String(200)), *_FLAT)
    target = _websites(("spec", sa.JSON()))
    for row in bind.execute(sa.select(flat)).all():
        bind.execute(target.update().where(target.c.id == row.id).values(spec=_fold(row)))
    with op.batch_alter_table("websites") as batch:
        batch.alter_column("spec", existing_type=sa.JSON(), nullable=False)
        batch.drop_constraint("ck_websites_pagination_type", type_="check")
        batch.drop_constraint("ck_websites_robots_policy", type_="check")
        for name, _kind in _FLAT:
            batch.drop_column(name)


def downgrade() -> None:
    for name, kind in _FLAT:
        op.add_column("websites", sa.Column(name, kind, nullable=True))
    bind = op.get_bind()
    source = _websites(("spec", sa.JSON()))
    flat = _websites(*_FLAT)
    for row in bind.execute(sa.select(source)).all():
        bind.execute(flat.update().where(flat.c.id == row.id).values(**_unfold(row.spec)))
    with op.batch_alter_table("websites") as batch:
        for name, kind in _FLAT:
            batch.alter_column(name, existing_type=kind, nullable=False)
        batch.drop_column("spec")
        batch.create_check_constraint(
            "ck_websites_pagination_type", "pagination_type IN ('none', 'next_link', 'page_param')"
        )
        batch.create_check_constraint("ck_websites_robots_policy", "robots_policy IN ('obey', 'ignore')")
