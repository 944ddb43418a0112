"""A worker's options (:class:`WorkerOptions`) and counters (:class:`WorkerStats`), shared by its
lifecycle (:mod:`crawlherd.worker.worker`) and its page pipeline (:mod:`crawlherd.worker.pages`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from crawlherd._options import Count, Delay, Seconds, check_options
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.base import FetchLimits

if TYPE_CHECKING:
    from crawlherd.worker.jobcrawl import ListingOutcome

__all__ = ["PAGE_DISPATCHERS", "PageDispatcher", "WorkerOptions", "WorkerStats"]

#: The engine dispatchers a worker can run its pages with.
PageDispatcher = Literal["semaphore", "memory-adaptive"]
PAGE_DISPATCHERS: tuple[str, ...] = get_args(PageDispatcher)


@dataclass
class WorkerStats:
    """Counters since the worker started. Each counter has one definition, shared by the status lines,
    the statistics dump, the worker's row on the console (its heartbeat) and the metrics -- and, per
    job, by ``job_runs`` (the console's jobs, its 24-hour totals, ``explain``):

    - jobs ``succeeded`` / ``retried`` / ``dead``: attempts that ended so (a retry is an attempt that
      failed and was sent again); ``skipped``, ``invalid``, ``requeued``, ``refused`` as named;
    - ``pages`` (listing): the listing pages read by the jobs' attempts, whatever their outcome
      (``job_attempts.pages``; ``job_runs`` has the latest attempt's); ``detail_pages``: the detail
      pages read and stored;
    - ``items_new`` / ``items_updated``: what those listing pages stored -- new rows, and existing rows
      whose fields changed (``job_attempts.items_new`` / ``items_updated``): an attempt that fails after
      storing items counts them, and its retry finds them stored. A detail page completes its item: it
      counts as a detail page, not as an item again.
    """

    received: int = 0
    succeeded: int = 0
    skipped: int = 0
    retried: int = 0
    dead: int = 0
    invalid: int = 0
    requeued: int = 0
    #: jobs given back because this worker's own settings refuse their website (no attempt spent)
    refused: int = 0
    pages: int = 0
    detail_pages: int = 0
    detail_failures: int = 0
    items_new: int = 0
    items_updated: int = 0
    in_flight: int = 0
    last_errors: list[str] = field(default_factory=list)

    def count(self, attempt: ListingOutcome) -> None:
        """Count what an attempt's listing pages read and stored (the attempt succeeded or failed)."""
        self.pages += attempt.pages
        self.items_new += attempt.items_new
        self.items_updated += attempt.items_updated

    def counters(self) -> dict[str, int]:
        """The counters under their one set of names (the statistics dump's, the heartbeat's)."""
        return {
            "jobs/succeeded": self.succeeded, "jobs/retried": self.retried, "jobs/dead": self.dead,
            "jobs/skipped": self.skipped, "jobs/requeued": self.requeued, "jobs/invalid": self.invalid,
            "jobs/refused": self.refused, "pages/listing": self.pages, "pages/detail": self.detail_pages,
            "pages/detail_failed": self.detail_failures, "items/new": self.items_new,
            "items/updated": self.items_updated,
        }

    def remember(self, message: str) -> None:
        """Keep ``message`` among the last ten errors."""
        self.last_errors = [*self.last_errors[-9:], message]


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """A worker's options. ``concurrency`` jobs at once (also the broker prefetch); ``page_dispatcher``
    -- the engine dispatcher that runs every page, listing and detail (``semaphore`` or
    ``memory-adaptive``) -- with ``page_concurrency`` pages in flight; ``frontier_url`` the frontier of
    those pages (``memory://``, ``sqlite:///file``, ``redis://...`` shared by all workers);
    ``lease_timeout`` of the frontier's leases (None: the frontier URL's ``?lease_timeout=``, else the
    frontier's default); ``max_attempts`` before a job is dead; ``backoff`` and ``max_backoff`` seconds
    (doubling per attempt, with jitter); ``limits`` for the fetchers; ``shutdown_timeout`` for jobs in
    flight at shutdown; ``name`` of the process (default: host and pid); ``poll_interval`` seconds
    between two looks at ``job_runs`` while a job's listing is read by another worker;
    ``heartbeat_interval`` seconds between the process's heartbeats; ``screenshot_dir`` where the
    screenshots of failed pages are kept, for websites that ask (``failure_screenshots``); ``details_stall``
    seconds a job waits while none of its detail pages out is settled before it fails them (longer
    than the frontier's lease, so that a dead worker's pages come back first)."""

    concurrency: Count = 4
    page_dispatcher: PageDispatcher = "semaphore"
    page_concurrency: Count = 8
    frontier_url: str = "memory://"
    lease_timeout: Seconds | None = None
    max_attempts: Count = 3
    backoff: Delay = 5.0
    max_backoff: Delay = 600.0
    limits: FetchLimits = field(default_factory=FetchLimits)
    shutdown_timeout: Delay = 30.0
    name: str | None = None
    poll_interval: Seconds = 1.0
    heartbeat_interval: Seconds = 10.0
    screenshot_dir: str = "crawlherd-screenshots"
    details_stall: Seconds = 900.0

    def __post_init__(self) -> None:
        check_options(self, "worker")
        if self.max_backoff < self.backoff:
            raise ConfigurationError(f"need backoff <= max_backoff, got {self.backoff!r} and {self.max_backoff!r}")
