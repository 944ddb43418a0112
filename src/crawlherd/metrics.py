"""Prometheus metrics of every crawlherd process (``prometheus-client``), served on ``--metrics-port``.

Names follow the Prometheus conventions: ``crawlherd_`` prefix, the unit in the name (``_seconds``),
``_total`` on counters. The instrumented code calls the small functions below (one line at each
place); a process serves them with :func:`serve_metrics`. Everything lives in :data:`REGISTRY`
(not the global default one), so the library never collides with its host application's metrics.

======================================== ========= ==================================================
name                                     type      meaning
======================================== ========= ==================================================
crawlherd_targets_due                    gauge     active targets whose next run is due (dispatcher)
crawlherd_outbox_pending_rows            gauge     outbox rows not yet confirmed by the broker
crawlherd_outbox_oldest_pending_seconds  gauge     age of the oldest pending outbox row (relay lag)
crawlherd_outbox_rows_written_total      counter   outbox rows written by the tick (one per slot)
crawlherd_relay_publishes_total          counter   publishes by ``outcome`` (confirmed, failed)
crawlherd_dispatch_lag_seconds           histogram slot time -> broker confirmed the publish
crawlherd_jobs_total                     counter   jobs by ``outcome`` (succeeded, retried, dead, skipped,
                                                   invalid)
crawlherd_job_duration_seconds           histogram one job attempt, start to outcome
crawlherd_jobs_in_flight                 gauge     jobs a worker holds now
crawlherd_job_pages_total                counter   listing pages crawled by jobs (= ``job_runs.pages``)
crawlherd_fetches_total                  counter   every fetch by ``status_class`` (2xx ... 5xx, error)
crawlherd_fetch_duration_seconds         histogram one fetch
crawlherd_items_total                    counter   items stored, by ``change`` (new, updated)
crawlherd_frontier_requests              gauge     the worker's frontier by ``state`` (queued, in_flight)
crawlherd_rate_limiter_backoffs_total    counter   rate-limited responses that made a domain back off
crawlherd_proxy_fetches_total            counter   fetches under a session by ``site``, ``proxy`` (its
                                                   label: credentials redacted, ``direct``) and
                                                   ``outcome`` (ok, blocked, lapsed, error)
crawlherd_logins_total                   counter   login steps by ``site`` and ``outcome`` (ok, failed)
crawlherd_memory_adaptive_state          enum      the memory-adaptive dispatcher's state
======================================== ========= ==================================================
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, generate_latest
from prometheus_client.exposition import start_http_server

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from crawlherd.result import CrawlResult

__all__ = [
    "REGISTRY",
    "exposition",
    "job_finished",
    "observe_fetch",
    "proxy_fetch",
    "serve_metrics",
]

#: Every crawlherd metric, in one registry.
REGISTRY = CollectorRegistry(auto_describe=True)

_LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
_JOB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

TARGETS_DUE = Gauge("crawlherd_targets_due", "Active targets whose next run is due.", registry=REGISTRY)
OUTBOX_PENDING = Gauge(
    "crawlherd_outbox_pending_rows", "Outbox rows not yet confirmed by the broker.", registry=REGISTRY
)
OUTBOX_OLDEST = Gauge(
    "crawlherd_outbox_oldest_pending_seconds", "Age of the oldest pending outbox row.", registry=REGISTRY
)
OUTBOX_WRITTEN = Counter(
    "crawlherd_outbox_rows_written", "Outbox rows written by the tick (one per slot).", registry=REGISTRY
)
RELAY_PUBLISHES = Counter(
    "crawlherd_relay_publishes", "Relay publishes by outcome.", ["outcome"], registry=REGISTRY
)
DISPATCH_LAG = Histogram(
    "crawlherd_dispatch_lag_seconds",
    "From a slot's time to the broker's confirmation of its job.",
    buckets=_LAG_BUCKETS,
    registry=REGISTRY,
)
JOBS = Counter("crawlherd_jobs", "Jobs handled by workers, by outcome.", ["outcome"], registry=REGISTRY)
JOB_DURATION = Histogram(
    "crawlherd_job_duration_seconds", "One job attempt, from start to outcome.", buckets=_JOB_BUCKETS,
    registry=REGISTRY,
)
JOBS_IN_FLIGHT = Gauge("crawlherd_jobs_in_flight", "Jobs a worker holds now.", registry=REGISTRY)
JOB_PAGES = Counter("crawlherd_job_pages", "Listing pages read by the jobs' attempts (any outcome).", registry=REGISTRY)
DETAIL_PAGES = Counter("crawlherd_detail_pages", "Detail pages read and stored.", registry=REGISTRY)
DETAILS_OUT = Gauge(
    "crawlherd_detail_pages_out",
    "Detail pages of the jobs a worker holds whose listing is done, queued and not settled yet.",
    registry=REGISTRY,
)
FETCHES = Counter("crawlherd_fetches", "Fetches by HTTP status class.", ["status_class"], registry=REGISTRY)
FETCH_DURATION = Histogram("crawlherd_fetch_duration_seconds", "One fetch.", registry=REGISTRY)
ITEMS = Counter("crawlherd_items", "Items the listing pages of the jobs' attempts stored, by change "
                "(new, updated: fields changed).", ["change"], registry=REGISTRY)
FRONTIER = Gauge("crawlherd_frontier_requests", "The worker's frontier, by state.", ["state"], registry=REGISTRY)
BACKOFFS = Counter(
    "crawlherd_rate_limiter_backoffs", "Rate-limited responses that made a domain back off.", registry=REGISTRY
)
MEMORY_STATE = Enum(
    "crawlherd_memory_adaptive_state",
    "The memory-adaptive dispatcher's state.",
    states=["normal", "pressure", "critical"],
    registry=REGISTRY,
)

for _outcome in ("succeeded", "retried", "dead", "skipped", "invalid", "refused"):
    JOBS.labels(outcome=_outcome)
for _outcome in ("confirmed", "failed"):
    RELAY_PUBLISHES.labels(outcome=_outcome)
for _change in ("new", "updated"):
    ITEMS.labels(change=_change)
for _class in ("2xx", "3xx", "4xx", "5xx", "error"):
    FETCHES.labels(status_class=_class)
for _state in ("queued", "in_flight"):
    FRONTIER.labels(state=_state)


def status_class(status: int | None) -> str:
    """``"2xx"`` ... ``"5xx"``, or ``"error"`` when there was no response."""
    if status is None or not 100 <= status <= 599:
        return "error"
    return f"{status // 100}xx"


PROXY_FETCHES = Counter(
    "crawlherd_proxy_fetches_total",
    "Fetches under a session by site, proxy label (credentials redacted) and outcome.",
    ["site", "proxy", "outcome"],
    registry=REGISTRY,
)
LOGINS = Counter("crawlherd_logins_total", "Login steps by site and outcome.", ["site", "outcome"], registry=REGISTRY)


def proxy_fetch(site: str, proxy_label: str, outcome: str) -> None:
    """Count one fetch under a session (``proxy_label`` is already redacted)."""
    PROXY_FETCHES.labels(site=site, proxy=proxy_label, outcome=outcome).inc()


def observe_fetch(result: CrawlResult) -> None:
    """Count one fetch by status class and time it."""
    FETCHES.labels(status_class=status_class(result.status_code)).inc()
    FETCH_DURATION.observe(max(0.0, result.elapsed))


def job_finished(outcome: str, *, seconds: float, pages: int = 0, items_new: int = 0, items_updated: int = 0) -> None:
    """Count one job attempt's outcome, its duration, its listing pages and items."""
    JOBS.labels(outcome=outcome).inc()
    JOB_DURATION.observe(max(0.0, seconds))
    JOB_PAGES.inc(pages)
    items_stored(new=items_new, updated=items_updated)


def items_stored(*, new: int, updated: int) -> None:
    """Count the items a job attempt's listing pages stored (see WorkerStats)."""
    ITEMS.labels(change="new").inc(new)
    ITEMS.labels(change="updated").inc(updated)


def exposition() -> bytes:
    """The metrics in the Prometheus text format (what ``/metrics`` serves)."""
    return generate_latest(REGISTRY)


_served: dict[int, WSGIServer] = {}
_lock = threading.Lock()


def serve_metrics(port: int, host: str = "127.0.0.1") -> int:
    """Serve ``/metrics`` on ``host:port`` in a background thread (``port`` 0: any free port); returns
    the port. Serving the same port twice in one process is a no-op."""
    with _lock:
        if port and port in _served:
            return port
        server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
        bound = int(server.server_port)
        _served[bound] = server
        return bound
