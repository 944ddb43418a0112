"""Options every frontier backend takes, validated once, from keywords and the URL's query string."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from crawlherd._options import AtLeast0, Count, Delay, Fraction, Seconds, check_options, option_types, url_options
from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import ConfigurationError
from crawlherd.frontier.base import FullPolicy

__all__ = ["FrontierOptions", "HostPolicy"]


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Per-host overrides; None keeps the frontier's default."""

    delay: Delay | None = None
    max_in_flight: Count | None = None

    def __post_init__(self) -> None:
        check_options(self, "host policy")

    def updated(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> HostPolicy:
        """This policy with the values given (None keeps the current one), checked; ``host`` names the
        host in the error."""
        try:
            return HostPolicy(
                delay=self.delay if delay is None else delay,
                max_in_flight=self.max_in_flight if max_in_flight is None else max_in_flight,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"{exc} (for {host})") from None


@dataclass(frozen=True)
class FrontierOptions:
    """``delay``: per-host minimum seconds between hand-outs. ``max_in_flight``: per-host cap.
    ``lease_timeout``: seconds before an unsettled lease returns its request. ``max_size``: queued
    requests at most (0: unbounded). ``full_policy``: ``block`` or ``raise``. ``dupefilter``: ``exact``
    or ``bloom`` (``error_rate``, ``capacity``). ``dupefilter_unavailable``: ``fail`` or ``allow``
    (backends whose filter lives in a service). The field types carry the bounds
    (:func:`crawlherd._options.check_options`)."""

    clock: Clock = field(default_factory=SystemClock)
    delay: Delay = 0.0
    max_in_flight: Count = 8
    host_policies: Mapping[str, HostPolicy] = field(default_factory=dict)
    lease_timeout: Seconds = 300.0
    max_size: AtLeast0 = 0
    full_policy: FullPolicy = "raise"
    dupefilter: Literal["exact", "bloom"] = "exact"
    error_rate: Fraction = 1e-7
    capacity: Count = 1_000_000
    dupefilter_unavailable: Literal["fail", "allow"] = "fail"

    def __post_init__(self) -> None:
        check_options(self, "frontier")

    @classmethod
    def build(
        cls, url: str, options: Mapping[str, Any], *, extra: Mapping[str, Any] | None = None
    ) -> tuple[FrontierOptions, dict[str, Any]]:
        """Split the URL's query parameters and ``options`` into the common options and the backend's
        own (``extra``: name -> type), each converted to its type (:mod:`crawlherd._options`).
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
