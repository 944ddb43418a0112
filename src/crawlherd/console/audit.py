"""The audit trail: every change made through the console or the CLI (who, what, when), written in
the same transaction as the change itself."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db.engine import db_now
from crawlherd.db.models import AuditEntry

__all__ = ["AuditRecord", "list_audit", "record"]


async def record(
    conn: AsyncConnection, *, actor: str, action: str, subject: str = "", detail: dict[str, Any] | None = None
) -> None:
    """Append one entry (in the caller's transaction). Never put a secret in ``detail``."""
    await conn.execute(
        insert(AuditEntry).values(
            at=await db_now(conn), actor=actor[:100], action=action[:100], subject=subject[:200], detail=detail or {}
        )
    )


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit entry."""

    id: int
    at: datetime
    actor: str
    action: str
    subject: str
    detail: dict[str, Any]


async def list_audit(engine: AsyncEngine, *, limit: int = 100, before_id: int | None = None) -> list[AuditRecord]:
    """The newest entries first (``before_id`` pages back)."""
    a = AuditEntry
    stmt = select(a.id, a.at, a.actor, a.action, a.subject, a.detail).order_by(a.id.desc()).limit(limit)
    if before_id is not None:
        stmt = stmt.where(a.id < before_id)
    async with engine.connect() as conn:
        return [AuditRecord(*row) for row in (await conn.execute(stmt)).all()]
