"""``crawlherd worker``: consume job messages and crawl them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.brokers import Broker
from crawlherd.cli._common import Output, Rates, periodic_status, settings_from, stats_dump
from crawlherd.cli._loop import loop_option, run_async, service_up
from crawlherd.cli._service import service_options, service_stores
from crawlherd.cli._signals import OVERDUE, stop_on_signals
from crawlherd.errors import BackendUnavailableError
from crawlherd.fetch.base import FetchLimits
from crawlherd.settings import Settings
from crawlherd.worker.worker import PAGE_DISPATCHERS, Worker, WorkerOptions

__all__ = ["make_worker", "run_options", "waiting_for", "worker", "worker_options", "worker_pool_size",
           "worker_started", "worker_statistics", "worker_status"]

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option("--concurrency", "worker_concurrency", type=click.IntRange(1, 1000), default=None,
                 help="Jobs in flight at once (also the broker prefetch).  [default: setting worker_concurrency, 4]"),
    click.option("--page-dispatcher", type=click.Choice(PAGE_DISPATCHERS), default=None,
                 help="The engine dispatcher that runs every page (listing and detail).  "
                 "[default: setting page_dispatcher, semaphore]"),
    click.option("--page-concurrency", type=click.IntRange(1, 1000), default=None,
                 help="Pages (listing and detail) in flight at once.  [default: setting page_concurrency, 8]"),
    click.option("--max-attempts", type=click.IntRange(1, 100), default=None,
                 help="Attempts before a job is dead.  [default: setting max_attempts, 3]"),
    click.option("--backoff", type=click.FloatRange(min=0), default=None,
                 help="First retry delay in seconds (doubles per attempt, with jitter).  "
                 "[default: setting backoff, 5]"),
    click.option("--allow-private", "allow_private_addresses", flag_value=True, default=None,
                 help="Let the fetchers reach private and loopback addresses (local sites).  "
                 "[default: setting allow_private_addresses, off]"),
    click.option("--frontier-url", default=None, metavar="URL",
                 help="Frontier of the pages (default: CRAWLHERD_FRONTIER_URL, else NAME-frontier.db beside a "
                 "SQLite config DB NAME.db, else memory://); redis://... shares it, and its politeness, between "
                 "workers."),
    loop_option,
]



def run_options(func: F) -> F:
    """The options of ``worker`` and ``run``: a service's (config DB, broker, metrics port, -q and
    --json) and the worker's."""
    return service_options(worker_options(func))


def worker_options(func: F) -> F:
    """The options of every command that runs a worker; they arrive as keyword arguments named as the
    settings they override (pass them to ``settings_from``)."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def worker_pool_size(settings: Settings) -> int:
    """The config DB pool of a process that runs a worker: as large as what the worker uses at once (a
    job's listing page and run record per job in flight, the detail pages' grouped writes, the
    heartbeat, the console), so that no connection is opened and closed per page."""
    return settings.worker_concurrency + 4


def make_worker(engine: AsyncEngine, broker: Broker, settings: Settings) -> Worker:
    """A worker from the settings (defaults < crawlherd.toml < CRAWLHERD_* < the worker's flags)."""
    limits = FetchLimits(allow_private_addresses=settings.allow_private_addresses, user_agent=settings.user_agent)
    return Worker(
        engine,
        broker,
        WorkerOptions(
            concurrency=settings.worker_concurrency,
            page_dispatcher=settings.page_dispatcher,
            page_concurrency=settings.page_concurrency,
            max_attempts=settings.max_attempts,
            backoff=settings.backoff,
            max_backoff=max(settings.backoff, 600.0),
            limits=limits,
            frontier_url=settings.effective_frontier_url,
            heartbeat_interval=settings.heartbeat_interval,
            screenshot_dir=settings.screenshot_dir,
            shutdown_timeout=settings.shutdown_timeout,
            details_stall=settings.details_stall,
        ),
    )


def worker_statistics(w: Worker, elapsed: float) -> dict[str, Any]:
    """The worker's counters for the end-of-run dump (and ``--json``)."""
    st = w.stats
    minutes = max(elapsed, 1e-9) / 60
    return {
        "elapsed_seconds": round(elapsed, 1),
        "jobs/received": st.received,
        **st.counters(),
        "pages/per_minute": round((st.pages + st.detail_pages) / minutes, 1),
        "items/per_minute": round((st.items_new + st.items_updated) / minutes, 1),
        "last_errors": list(st.last_errors[-5:]),
    }


def worker_status(w: Worker, rates: Rates) -> str:
    """One status line: pages and items with their rates per minute, the jobs, and the outages under
    way (``broker unavailable for 42 s``) until they end."""
    st = w.stats
    jobs = f"jobs {st.succeeded} done, {st.in_flight} running, {st.retried} retried, {st.dead} dead"
    if st.refused:
        jobs += f", {st.refused} given back (this worker's settings refuse their website)"
    outages = w.outages.describe()
    return rates.line(st.pages + st.detail_pages, st.items_new + st.items_updated,
                      f"{jobs}; {outages}" if outages else jobs)


@contextlib.contextmanager
def worker_started(
    engine: AsyncEngine, broker: Broker, broker_down: BackendUnavailableError | None, settings: Settings,
    out: Output, banner: Callable[[Worker], str],
) -> Iterator[tuple[Worker, asyncio.Event]]:
    """A worker from the settings and the event that stops it, set by SIGTERM or Ctrl+C from before its
    ``banner`` on (so that Ctrl+C is clean from then on); a broker down at start-up (``broker_down``) is
    said now, and on every status line until it is back."""
    w = make_worker(engine, broker, settings)
    stop = asyncio.Event()
    with stop_on_signals(stop, waiting_for(w), overdue=w.options.shutdown_timeout + OVERDUE):
        out.info(banner(w))
        if broker_down is not None:
            w.outages.down("broker", broker_down)
        yield w, stop


def waiting_for(w: Worker) -> Callable[[], str]:
    """What a stopping worker waits for, for the "stopping…" line."""
    return lambda: (
        f"{w.stats.in_flight} job(s) in flight to finish "
        f"(up to {w.options.shutdown_timeout:g} s; the rest are requeued)"
    )


@click.command()
@run_options
@click.pass_context
def worker(
    ctx: click.Context, /, database_url: str | None, broker_url: str | None, metrics_port: int | None, quiet: bool,
    as_json: bool, **options: Any,
) -> None:
    """Consume scrape jobs and crawl them; items go to the config DB's items table.

    A job whose run already succeeded is skipped; a failed job is retried with a growing delay and is
    dead after --max-attempts (see `crawlherd jobs dead`). Run as many workers as you like, on as many
    machines (share a redis:// --frontier-url so that they share politeness and seen pages).
    SIGTERM or Ctrl+C: stop taking jobs, let jobs in flight finish (30 s), requeue the rest.

    \b
    Output: a status line (pages/min, items/min, jobs) redrawn on a terminal, else a plain line every
    status_interval seconds; at the end, the statistics (--json: as one JSON object on stdout).
    """
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url, **options)
    out = Output(quiet=quiet, as_json=as_json)

    def banner(w: Worker) -> str:
        return (
            f"worker {w.name}: {redact_url(settings.effective_broker_url)} -> {redact_url(settings.database_url)}, "
            f"{w.options.concurrency} job(s) at once, frontier {redact_url(w.options.frontier_url)}"
        )

    async def main() -> None:
        stores = service_stores(settings, out, metrics_port=metrics_port, pool_size=worker_pool_size(settings))
        async with stores as (engine, broker, broker_down):
            rates = Rates()
            with worker_started(engine, broker, broker_down, settings, out, banner) as (w, stop):
                if not settings.frontier_url and not settings.database_url.startswith("sqlite"):
                    click.secho(
                        "warning: this worker's frontier is memory://, its own: the other workers of a fleet on "
                        "this config DB share neither its seen pages nor its politeness (a site may get several "
                        "workers' requests at once); give every worker the same --frontier-url redis://...",
                        fg="yellow", err=True,
                    )
                async with w, periodic_status(out, lambda: worker_status(w, rates), settings.status_interval):
                    service_up()
                    await w.run(stop)
            stats = worker_statistics(w, rates.elapsed)
            out.info(stats_dump(f"worker stopped ({w.name}); statistics", stats, tty=out.tty))
            out.result("", stats)

    with contextlib.suppress(asyncio.CancelledError):
        run_async(main(), settings.event_loop)
