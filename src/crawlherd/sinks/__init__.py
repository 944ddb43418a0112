"""Where items go, chosen by URL: ``sqlite:///path`` / ``postgresql://...`` (the config DB's ``items``
table, upsert on the item fingerprint), ``memory://`` (in-process reference); and exports."""

from __future__ import annotations

from typing import Any

from crawlherd._registry import open_backend
from crawlherd.sinks.base import DETAIL_AT, Sink, SinkBase, SinkRecord, UpsertCounts
from crawlherd.sinks.memory import MemorySink
from crawlherd.sinks.sql import SQLSink

__all__ = [
    "DETAIL_AT",
    "SINK_ALIASES",
    "MemorySink",
    "SQLSink",
    "Sink",
    "SinkBase",
    "SinkRecord",
    "UpsertCounts",
    "open_sink",
]

SINK_ALIASES: dict[str, str] = {
    "memory": "crawlherd.sinks.memory:MemorySink",
    "sqlite": "crawlherd.sinks.sql:SQLSink",
    "postgresql": "crawlherd.sinks.sql:SQLSink",
    "postgres": "crawlherd.sinks.sql:SQLSink",
}


def open_sink(url: str, **options: Any) -> Sink:
    """A sink for ``url``; use it as ``async with open_sink(url) as sink: ...``."""
    sink: Sink = open_backend(url, SINK_ALIASES, "sink", **options)
    return sink
