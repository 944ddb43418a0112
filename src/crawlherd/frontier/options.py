"""Options every frontier backend takes, validated once, from keywords and the URL's query string."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crawlherd._urloptions import option_types, url_options
from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import ConfigurationError
from crawlherd.frontier.base import FullPolicy

__all__ = ["FrontierOptions", "HostPolicy"]


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Per-host overrides; None keeps the frontier's default."""

    delay: float | None = None
    max_in_flight: int | None = None

    def updated(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> HostPolicy:
        """This policy with the values given (None keeps the current one), checked; ``host`` names the
        host in the error."""
        if delay is not None and delay < 0:
            raise ConfigurationError(f"delay={delay!r} for {host}: must be >= 0 seconds")
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigurationError(f"max_in_flight={max_in_flight!r} for {host}: must be >= 1")
        return HostPolicy(
            delay=self.delay if delay is None else delay,
            max_in_flight=self.max_in_flight if max_in_flight is None else max_in_flight,
        )


@dataclass(frozen=True)
class FrontierOptions:
    """``delay``: per-host minimum seconds between hand-outs. ``max_in_flight``: per-host cap.
    ``lease_timeout``: seconds before an unsettled lease returns its request. ``max_size``: queued
    requests at most (0: unbounded). ``full_policy``: ``block`` or ``raise``. ``dupefilter``: ``exact``
    or ``bloom`` (``error_rate``, ``capacity``). ``dupefilter_unavailable``: ``fail`` or ``allow``
    (backends whose filter lives in a service)."""

    clock: Clock = field(default_factory=SystemClock)
    delay: float = 0.0
    max_in_flight: int = 8
    host_policies: Mapping[str, HostPolicy] = field(default_factory=dict)
    lease_timeout: float = 300.0
    max_size: int = 0
    full_policy: FullPolicy = "raise"
    dupefilter: str = "exact"
    error_rate: float = 1e-7
    capacity: int = 1_000_000
    dupefilter_unavailable: str = "fail"

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigurationError:
            return ConfigurationError(f"frontier option {name}={getattr(self, name)!r}: {why}")

        if self.delay < 0:
            raise bad("delay", "must be >= 0 seconds")
        if self.max_in_flight < 1:
            raise bad("max_in_flight", "must be >= 1")
        if self.lease_timeout <= 0:
            raise bad("lease_timeout", "must be > 0 seconds")
        if self.max_size < 0:
            raise bad("max_size", "must be >= 0 (0 means unbounded)")
        if self.full_policy not in ("block", "raise"):
            raise bad("full_policy", "use 'block' or 'raise'")
        if self.dupefilter not in ("exact", "bloom"):
            raise bad("dupefilter", "use 'exact' or 'bloom'")
        if not 0 < self.error_rate < 1:
            raise bad("error_rate", "must be between 0 and 1")
        if self.capacity < 1:
            raise bad("capacity", "must be >= 1")
        if self.dupefilter_unavailable not in ("fail", "allow"):
            raise bad("dupefilter_unavailable", "use 'fail' or 'allow'")

    @classmethod
    def build(
        cls, url: str, options: Mapping[str, Any], *, extra: Mapping[str, Any] | None = None
    ) -> tuple[FrontierOptions, dict[str, Any]]:
        """Split the URL's query parameters and ``options`` into the common options and the backend's
        own (``extra``: name -> type), each converted to its type (:mod:`crawlherd._urloptions`).
        Unknown names raise ConfigurationError."""
        common_types = option_types(cls)
        known = {**(extra or {}), **common_types}
        values = url_options(url, options, known, what="frontier")
        common = {k: v for k, v in values.items() if k in common_types}
        own = {k: v for k, v in values.items() if k not in common_types}
        policies = common.get("host_policies")
        if policies:
            common["host_policies"] = {
                h: p if isinstance(p, HostPolicy) else HostPolicy(**p) for h, p in policies.items()
            }
        return cls(**common), own
