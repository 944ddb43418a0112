"""Saying an outage once: one warning when a service stops answering, one info when it is back.

A worker (or a dispatch service) that loses its broker, its frontier or its config DB keeps trying
with back-off; what it logs must not be a warning (let alone a traceback) per attempt per job, but one
line when the outage starts and one when it ends, with how long it lasted.
"""

from __future__ import annotations

import logging
import random
import time

__all__ = ["OutageLog", "backoff_delay"]


def backoff_delay(failures: int, *, base: float = 0.5, cap: float = 30.0) -> float:
    """Seconds to wait after the ``failures``-th failure in a row: ``base * 2**(failures-1)``, capped,
    with +-20 % jitter (so that workers do not reconnect in step)."""
    delay = min(cap, base * 2 ** max(0, failures - 1))
    jittered: float = delay * random.uniform(0.8, 1.2)
    return min(cap, jittered)


class OutageLog:
    """Tracks which services are down; logs the first failure and the recovery of each, once.

    A failure within ``grace`` seconds of a recovery is the same outage's tail (a client's pooled
    connections to a restarted server each fail once) and is logged at debug level only.
    """

    def __init__(self, logger: logging.Logger, who: str, *, grace: float = 10.0) -> None:
        self._log = logger
        self._who = who
        self._grace = grace
        self._since: dict[str, float] = {}
        self._quiet: set[str] = set()  # down again within the grace: no second "back" line
        self._back_at: dict[str, float] = {}

    def is_down(self, service: str) -> bool:
        """True while ``service`` is in an outage."""
        return service in self._since

    def down(self, service: str, error: object) -> bool:
        """``service`` failed: a warning if it was up (the outage starts). True when it was up."""
        now = time.monotonic()
        if service in self._since:
            self._log.debug("%s: %s still unavailable: %s", self._who, service, error)
            return False
        self._since[service] = now
        if now - self._back_at.get(service, -1e18) < self._grace:
            self._quiet.add(service)
            self._log.debug("%s: %s failed again just after it came back: %s", self._who, service, error)
            return False
        self._log.warning("%s: %s unavailable (%s); carrying on, retrying with back-off", self._who, service, error)
        return True

    def up(self, service: str) -> bool:
        """``service`` answered: an info line if it was down (the outage ends). True when it was down."""
        since = self._since.pop(service, None)
        if since is None:
            return False
        now = time.monotonic()
        self._back_at[service] = now
        if service in self._quiet:
            self._quiet.discard(service)
            return True
        self._log.info("%s: %s is back after %.1fs", self._who, service, now - since)
        return True
