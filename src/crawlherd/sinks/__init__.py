"""Where items go: the config DB's ``items`` table (upsert on the item fingerprint), and exports."""

from __future__ import annotations

from crawlherd.sinks.base import ItemSink, UpsertCounts
from crawlherd.sinks.sql import SQLItemSink

__all__ = ["ItemSink", "SQLItemSink", "UpsertCounts"]
