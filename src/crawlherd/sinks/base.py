"""The item sink protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from crawlherd.extract.rules import Item

__all__ = ["ItemSink", "UpsertCounts"]


@dataclass(frozen=True, slots=True)
class UpsertCounts:
    """How many items an upsert created and how many it changed (unchanged ones are neither)."""

    new: int = 0
    updated: int = 0


class ItemSink(Protocol):
    """Stores items idempotently: storing the same item twice leaves one row (keyed by fingerprint)."""

    async def upsert(
        self, items: Sequence[Item], *, website_id: int, target_id: int | None, seen_at: datetime
    ) -> UpsertCounts:
        """Insert new items, update changed ones (their fields merged over the stored ones), and move
        ``last_seen`` of every one to ``seen_at``."""
        ...
