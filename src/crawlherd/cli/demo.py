"""``crawlherd demo``: the whole pipeline against the built-in demo site, in seconds, with no set-up."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import update

from crawlherd.brokers import open_broker
from crawlherd.cli._common import Output, output_options
from crawlherd.cli._console import console_options, console_or_none
from crawlherd.cli._signals import stop_on_signals
from crawlherd.db import ScrapeTarget, create_engine, upgrade
from crawlherd.demo import DemoSite
from crawlherd.demo.targets import demo_targets, expected_results, targets_toml, without_browser
from crawlherd.dispatch.embedded import RunProgress, progress_of, run_embedded
from crawlherd.dispatch.targets import import_targets
from crawlherd.fetch.base import FetchLimits
from crawlherd.settings import frontier_beside
from crawlherd.sinks.export import iter_items
from crawlherd.worker.worker import Worker, WorkerOptions

__all__ = ["demo"]


@click.command()
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False),
    default="crawlherd-demo",
    show_default=True,
    help="Where the demo writes its database and targets file (made afresh each run).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=5),
    default=180,
    show_default=True,
    help="Give up (exit 1) if the demo jobs are not all settled by then.",
)
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True, help="Jobs at once.")
@click.option("--no-browser", is_flag=True, help="Leave out the JavaScript-rendered website.")
@console_options
@click.option(
    "--serve",
    is_flag=True,
    help="After the demo, keep the console (and the pipeline and demo site behind it) up until Ctrl+C, "
    "to look around: jobs, items, lineage, Run now.",
)
@output_options
def demo(
    workdir: str, timeout: float, concurrency: int, no_browser: bool, console_port: int, no_console: bool,
    serve: bool, quiet: bool, as_json: bool,
) -> None:
    """Run the whole pipeline against a built-in local job board and show what it found.

    \b
    1. starts the demo site on 127.0.0.1 (paginated search, next-link browsing with detail pages,
       a JavaScript-rendered listing, and a 429 with Retry-After now and then);
    2. creates a fresh SQLite config DB in --dir and imports the demo targets (--dir/targets.toml);
    3. serves the console on http://127.0.0.1:8080/ (the URL is printed; --console-port, --no-console);
    4. runs the dispatch service, the broker (a table in the same file) and a worker until every demo
       job is settled;
    5. prints a summary and checks the items against the demo site's own listing (--json: the summary
       as one JSON object on stdout), then exits (exit 1 when they differ) -- or, with --serve, keeps
       the console up until Ctrl+C.
    """
    if serve and no_console:
        raise click.UsageError("--serve keeps the console up: it cannot go with --no-console")
    console = Console(quiet=quiet or as_json)
    summary: dict[str, Any] = {"ok": False}
    with contextlib.suppress(asyncio.CancelledError):
        summary = asyncio.run(
            _demo(
                Path(workdir), timeout, concurrency, no_browser, console,
                console_port=None if no_console else console_port, serve=serve,
            )
        )
    Output(quiet=quiet, as_json=as_json).result("", summary)
    if not summary["ok"]:
        raise SystemExit(1)


def _browser_available() -> str | None:
    """None when a browser can be driven, else the reason it cannot."""
    try:
        from crawlherd.fetch.browser import find_chromium

        find_chromium()
    except Exception as exc:  # BrowserUnavailableError, or Playwright not installed
        return str(exc)
    return None


def _fresh_dir(workdir: Path) -> None:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)


async def _demo(
    workdir: Path, timeout: float, concurrency: int, no_browser: bool, console: Console, *,
    console_port: int | None = None, serve: bool = False,
) -> dict[str, Any]:
    """The demo; its summary as data. With ``console_port``, the console is served meanwhile (and, with
    ``serve``, after it until SIGINT/SIGTERM, the pipeline still running)."""
    await asyncio.to_thread(_fresh_dir, workdir)
    db_url = f"sqlite:///{workdir / 'demo.db'}"
    started = time.monotonic()
    # One listing page in 12 answers 429 with Retry-After at first: enough to show the rate limiter
    # back off and re-fetch, not so many that the demo crawls slowly.
    async with DemoSite(throttle_every=12) as site:
        document: dict[str, Any] = demo_targets(site.url)
        reason = "--no-browser" if no_browser else _browser_available()
        if reason:
            document = without_browser(document)
            console.print(f"[yellow]JavaScript-rendered website left out: {reason}[/yellow]")
        targets_file = workdir / "targets.toml"
        await asyncio.to_thread(targets_file.write_text, targets_toml(document), encoding="utf-8")
        engine = create_engine(db_url)
        try:
            await upgrade(engine)
            imported = await import_targets(engine, targets_file)
            async with engine.begin() as conn:  # the demo runs every target now, not at its first slot
                await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC)))
            console.print(
                f"demo site at {site.url}; imported {imported.targets_created} targets of "
                f"{imported.websites_created} websites from {targets_file}"
            )
            async with (
                console_or_none(engine, console_port or 0, enabled=console_port is not None) as web,
                open_broker(db_url) as broker,
            ):
                if web is not None:
                    console.print(f"console: {web.url}", soft_wrap=True, highlight=False)
                limits = FetchLimits(allow_private_addresses=True, user_agent="crawlherd-demo")
                worker = Worker(
                    engine,
                    broker,
                    WorkerOptions(
                        concurrency=concurrency,
                        max_attempts=3,
                        backoff=0.5,
                        max_backoff=5.0,
                        limits=limits,
                        frontier_url=frontier_beside(db_url),
                    ),
                )
                async with worker:
                    final, interrupted = await _run_demo_jobs(engine, broker, worker, started, timeout, console)
                    summary = await _summary(
                        engine, site, document, final, worker, workdir, time.monotonic() - started, timeout, console
                    )
                    if serve and web is not None and not interrupted:
                        await _keep_serving(engine, broker, worker, web.url, console)
            return summary
        finally:
            await engine.dispose()


async def _run_demo_jobs(
    engine: Any, broker: Any, worker: Worker, started: float, timeout: float, console: Console
) -> tuple[RunProgress, bool]:
    """Run the pipeline with a progress bar until every demo job is settled, ``timeout`` passes or a
    signal stops it; returns the last progress and whether a signal stopped it."""
    stop = asyncio.Event()
    timed_out = False
    with Progress(
        TextColumn("[bold]jobs"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=None)

        def show(p: RunProgress) -> None:
            nonlocal timed_out
            bar.update(
                task,
                total=p.jobs or None,
                completed=p.settled,
                description=f"{p.running} running, {p.failed} retrying, {p.dead} dead",
            )
            if time.monotonic() - started > timeout:
                timed_out = True
                stop.set()

        with stop_on_signals(stop):
            final = await run_embedded(
                engine, broker, worker, stop=stop, interval=0.2, until_idle=True, on_progress=show,
                progress_every=0.2,
            )
    return final, stop.is_set() and not timed_out and not final.idle  # idle: it ended by itself


async def _keep_serving(engine: Any, broker: Any, worker: Worker, url: str, console: Console) -> None:
    """--serve: the pipeline keeps running (Run now works) and the console stays up until a signal."""
    console.print(
        f"the console stays up at {url} with the pipeline running (Run now works there); Ctrl+C stops",
        soft_wrap=True, highlight=False,
    )
    stop = asyncio.Event()
    with stop_on_signals(stop):
        await run_embedded(engine, broker, worker, stop=stop, interval=0.5)


async def _summary(
    engine: Any,
    site: DemoSite,
    document: dict[str, Any],
    p: RunProgress,
    worker: Worker,
    workdir: Path,
    elapsed: float,
    timeout: float,
    console: Console,
) -> dict[str, Any]:
    """Print the summary on ``console``; return it as data (``ok``: every job settled, none dead, the
    items exactly the site's)."""
    expected = expected_results(site, document)
    stored: dict[str, set[str]] = {}
    async for item in iter_items(engine):
        stored.setdefault(item["website"], set()).add(item["fingerprint"])
    progress = await progress_of(engine)
    s = worker.stats
    console.print(f"[bold]crawlherd demo[/bold] finished in {elapsed:.1f}s")
    console.print(
        f"  targets dispatched: {progress.jobs}   jobs done: {progress.succeeded}   "
        f"retried: {s.retried}   dead: {progress.dead}"
    )
    console.print(
        f"  pages fetched: {s.pages} listing + {s.detail_pages} detail   items: {sum(len(v) for v in stored.values())} "
        f"({s.items_new} new, {s.items_updated} updated)   rate-limit answers from the site: "
        f"{site.log.count(status=429)}"
    )
    ok = progress.idle and progress.dead == 0
    websites: dict[str, dict[str, Any]] = {}
    for website, want in expected.items():
        got = stored.get(website, set())
        missing = set(want) - got
        extra = got - set(want)
        mark = "[green]ok[/green]" if not missing and not extra else "[red]MISMATCH[/red]"
        console.print(f"  {website:20} {len(got):4} items stored, the site lists {len(want):4}  {mark}")
        websites[website] = {"stored": len(got), "listed": len(want), "missing": len(missing), "extra": len(extra)}
        ok = ok and not missing and not extra
    if not progress.idle:
        console.print(f"[red]  not every job settled within --timeout {timeout:g}s[/red]")
    for line in s.last_errors[-3:]:
        console.print(f"  last error: {line}")
    console.print(
        f"  items are in {workdir / 'demo.db'} (table items); export them with:\n"
        f"    crawlherd items export --database-url sqlite:///{workdir / 'demo.db'} --format csv"
    )
    return {
        "ok": ok, "elapsed_seconds": round(elapsed, 1), "settled": progress.idle, "jobs": progress.jobs,
        "jobs/succeeded": progress.succeeded, "jobs/retried": s.retried, "jobs/dead": progress.dead,
        "pages/listing": s.pages, "pages/detail": s.detail_pages, "items/new": s.items_new,
        "items/updated": s.items_updated, "rate_limited": site.log.count(status=429), "websites": websites,
        "database": f"sqlite:///{workdir / 'demo.db'}", "last_errors": list(s.last_errors[-3:]),
    }
