"""The ``redis://`` frontier's own options (besides :class:`~crawlherd.frontier.options.FrontierOptions`),
bounded by their types and checked by :func:`crawlherd._options.check_options`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge, Le

from crawlherd._options import NonEmpty, Seconds, check_options
from crawlherd.errors import ConfigurationError

__all__ = ["RedisOptions"]


@dataclass(frozen=True)
class RedisOptions:
    """``prefix``: key namespace. ``poll_interval``: seconds between looks for other workers' changes
    while waiting. ``socket_timeout``: seconds (connections the frontier makes). ``dupefilter_bits``:
    log2 of the exact filter's set count (default from ``capacity``, about 200 fingerprints per set;
    fixed when the frontier is created). ``wait_replicas``: every write script followed by ``WAIT n``;
    fewer acknowledgements within ``wait_timeout`` seconds raise BackendUnavailableError. ``shards``:
    ``redis+cluster://`` only. ``liveness``: seconds a lease stays its holder's without being renewed --
    the frontier object that leased it renews all it holds every third of that while it is open -- so the
    pages of a process that died come back about that long after, not after ``lease_timeout`` (which
    stays the bound of one page on a live holder)."""

    prefix: NonEmpty = "crawlherd"
    poll_interval: Seconds = 0.2
    socket_timeout: Seconds = 10.0
    dupefilter_bits: Annotated[int, Ge(0), Le(24)] | None = None
    wait_replicas: Annotated[int, Ge(0), Le(16)] = 0
    wait_timeout: Seconds = 1.0
    shards: Annotated[int, Ge(1), Le(1024)] | None = None
    liveness: Seconds = 15.0

    def __post_init__(self) -> None:
        check_options(self, "redis frontier")
        if any(c.isspace() for c in self.prefix):  # a shape, not a bound: check_options has no word for it
            raise ConfigurationError(f"redis frontier option prefix={self.prefix!r}: must not contain spaces")
