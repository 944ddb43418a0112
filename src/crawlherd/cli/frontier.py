"""``crawlherd frontier stats|purge --url URL``: look at or empty a persistent frontier (``purge`` empties
its sessions store too)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

import click

from crawlherd._redact import redact_url
from crawlherd.cli._common import Output, output_options
from crawlherd.errors import ConfigurationError
from crawlherd.frontier import FrontierAdmin, open_scheduler
from crawlherd.sessions import open_sessions

__all__ = ["frontier"]

F = TypeVar("F", bound=Callable[..., Any])

_URL_HELP = "Frontier URL: sqlite:///crawl.db or redis://host:6379/0?prefix=mycrawl."


def _frontier_options(func: F) -> F:
    """``--url`` and ``--dupefilter``: which frontier."""
    func = click.option("--dupefilter", type=click.Choice(["exact", "bloom"]), default=None,
                        help="The frontier's filter kind.")(func)
    return click.option("--url", required=True, envvar="CRAWLHERD_FRONTIER_URL", help=_URL_HELP)(func)


def _options(dupefilter: str | None) -> dict[str, Any]:
    return {} if dupefilter is None else {"dupefilter": dupefilter}


@click.group()
def frontier() -> None:
    """Inspect or empty a frontier (the crawl queue and its duplicate filter)."""


@frontier.command()
@_frontier_options
@click.option("--memory", is_flag=True, help="Redis only: bytes used per kind of key (scans the keys).")
@output_options
def stats(url: str, dupefilter: str | None, memory: bool, quiet: bool, as_json: bool) -> None:
    """Counters of the frontier at URL: queued, in flight, enqueued, acked, duplicates, ..."""

    async def run() -> tuple[dict[str, Any], dict[str, int] | None]:
        async with open_scheduler(url, **_options(dupefilter)) as f:
            snapshot = asdict(await f.stats())
            used = None
            if memory:
                measure = getattr(f, "memory_usage", None)
                if measure is None:
                    raise ConfigurationError("--memory is for redis:// frontiers")
                used = await measure()
            return snapshot, used

    snapshot, used = asyncio.run(run())
    data = dict(sorted((snapshot | ({} if used is None else {"memory_bytes": used})).items()))
    lines = [f"frontier {redact_url(url)}"]
    hosts = snapshot.pop("hosts")
    for name, value in snapshot.items():
        if name == "oldest_queued_age" and value is not None:
            value = f"{value:.1f}s"
        lines.append(f"  {name:<24} {value}")
    lines.append(f"  {'hosts with queued work':<24} {len(hosts)}")
    lines += [f"    {host:<40} {depth}" for host, depth in sorted(hosts.items(), key=lambda kv: -kv[1])[:10]]
    lines += [f"  memory {kind:<17} {n} bytes" for kind, n in (used or {}).items()]
    Output(quiet=quiet, as_json=as_json).result("\n".join(lines), data)


@frontier.command()
@_frontier_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@output_options
def purge(url: str, dupefilter: str | None, yes: bool, quiet: bool, as_json: bool) -> None:
    """Delete everything of the frontier at URL: queue, leases, duplicate filter, counters -- and its
    sessions store: every website's sessions (logins), proxy health and tier.

    Stop the workers that use it first."""
    if not yes:
        click.confirm(f"Delete the whole frontier at {redact_url(url)}, with its sessions?", abort=True)

    async def run() -> tuple[int, int]:
        f = open_scheduler(url, **_options(dupefilter))
        try:
            # not entered: a purge must work on a frontier this version cannot otherwise open
            if not isinstance(f, FrontierAdmin):
                raise ConfigurationError(f"the frontier at {redact_url(url)} keeps nothing to purge")
            # the sessions first: on a plain Redis their keys are under the frontier's prefix too
            async with open_sessions(url) as sessions:
                sites = await sessions.purge()
            return await f.purge(), sites
        finally:
            await f.close()

    n, sites = asyncio.run(run())
    Output(quiet=quiet, as_json=as_json).result(
        f"purged {redact_url(url)} ({n} deleted; the sessions and proxy health of {sites} websites forgotten)",
        {"url": redact_url(url), "deleted": n, "session_sites": sites},
    )
