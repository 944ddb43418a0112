"""What the demo site served: one :class:`ServedRequest` per request, in a bounded :class:`RequestLog`."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RequestLog", "ServedRequest"]


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """One request the demo site answered: at ``time`` (the site's clock), the ``method``, ``path``
    and ``query`` asked for, and the ``status`` answered."""

    time: float
    method: str
    path: str
    query: str
    status: int


@dataclass
class RequestLog:
    """Counters of the requests served, with timestamps (from the site's clock). Keeps the last
    ``max_entries`` requests (a long-running ``python -m crawlherd.demo`` does not grow without bound)."""

    max_entries: int = 1_000_000
    entries: deque[ServedRequest] = field(init=False)

    def __post_init__(self) -> None:
        self.entries = deque(maxlen=self.max_entries)

    def __iter__(self) -> Iterator[ServedRequest]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def by_path(self) -> Counter[str]:
        """Requests per path (query string left out)."""
        return Counter(entry.path for entry in self.entries)

    def count(self, *, prefix: str = "", status: int | None = None) -> int:
        """Requests whose path starts with ``prefix`` (and with ``status`` when given)."""
        return sum(
            1 for entry in self.entries if entry.path.startswith(prefix) and (status is None or entry.status == status)
        )

    def clear(self) -> None:
        """Forget every entry."""
        self.entries.clear()

    def as_dicts(self) -> list[dict[str, Any]]:
        """The entries as plain dicts (for JSON output)."""
        return [asdict(entry) for entry in self.entries]
