"""``crawlherd crawl URL...``: crawl from seed URLs, following links, politely."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import click

from crawlherd.cli._loop import loop_option, run_async
from crawlherd.errors import CrawlherdError

if TYPE_CHECKING:
    from crawlherd.cli._common import Output
    from crawlherd.crawler import CrawlerRunConfig
    from crawlherd.fetch.base import FetchLimits

__all__ = ["crawl"]

_EPILOG = """\b
Examples:
  crawlherd crawl https://example.com --max-pages 50
  crawlherd crawl https://example.com/blog/ --depth 3 --delay 2 --respect-robots -o pages.jsonl
  crawlherd crawl http://127.0.0.1:8000/ --allow-private --concurrency 32 --delay 0

\b
Politeness: requests to one host are spaced by --delay seconds (robots.txt's Crawl-delay raises it
with --respect-robots) and at most --per-host run at once; a 429/503 answer blocks the host for its
Retry-After (or an exponential back-off) and the page is fetched again, up to 3 times.
Links are followed within the seeds' hosts (and their subdomains) unless --domain is given.
Private, loopback and link-local addresses are refused unless --allow-private.

\b
Output (--output): one JSON object per line: url, final_url, status_code, success, error_type,
error_message, content_type, size, elapsed, depth, links, dispatch (timing, memory, retries);
add --with-body to include the page text.

\b
Exit status: 0 when at least one page was fetched, 1 when nothing could be crawled,
2 on a usage or configuration error.
"""


@click.command(epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("urls", nargs=-1, required=True, metavar="URL...")
@click.option("--max-pages", type=click.IntRange(min=1), default=100, show_default=True,
              help="Stop after this many pages were queued (seeds included).")
@click.option("--depth", "max_depth", type=click.IntRange(min=0), default=2, show_default=True,
              help="How many links away from a seed to go (0: only the seeds).")
@click.option("--concurrency", type=click.IntRange(min=1, max=10_000), default=None,
              help="Requests in flight at once, over all hosts.  [default: setting concurrency, 16]")
@click.option("--per-host", type=click.IntRange(min=1), default=None,
              help="Requests in flight at once to one host.  [default: setting max_in_flight_per_host, 2]")
@click.option("--delay", type=click.FloatRange(min=0), default=None,
              help="Seconds between two requests to the same host.  [default: setting delay, 1.0]")
@click.option("--respect-robots/--ignore-robots", default=None,
              help="Obey robots.txt (disallowed pages are reported, not fetched) and its Crawl-delay.  "
              "[default: setting respect_robots, on]")
@click.option("--allow-private", is_flag=True, help="Allow private, loopback and link-local addresses.")
@click.option("--domain", "domains", multiple=True, metavar="HOST",
              help="Follow links only to this host and its subdomains (repeatable; '*' for any).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Total seconds allowed for one page.")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8"), default=None,
              help="Write one JSON line per page to this file ('-' for stdout).")
@click.option("--with-body", is_flag=True, help="Include the page text in --output.")
@click.option("--frontier", default="memory://", show_default=True,
              help="Frontier URL: memory://, sqlite:///crawl.db (resumable), redis://host/0?prefix=crawl.")
@click.option("--progress/--no-progress", default=None,
              help="Live progress view (default: when the terminal is interactive; otherwise a plain status "
              "line every status_interval seconds).")
@click.option("--proxy", "proxies", multiple=True, metavar="URL",
              help="Fetch through this proxy: http://, https:// or socks5://, credentials in the URL "
              "(user:password@); repeat it to take turns (round robin). Politeness stays per host.")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'", help="Send this header (repeatable).")
@click.option("--cookie", "cookies", multiple=True, metavar="NAME=VALUE",
              help="Send this cookie to the sites (repeatable); cookies the sites set are sent back.")
@click.option("--user-agent", default=None, metavar="TEXT", help="The User-Agent to send.  [default: setting "
              "user_agent]")
@loop_option
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors (and --json's result).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary and statistics as one JSON object on stdout.")
@click.pass_context
def crawl(
    ctx: click.Context,
    /,
    urls: tuple[str, ...],
    max_pages: int,
    max_depth: int,
    concurrency: int | None,
    per_host: int | None,
    delay: float | None,
    respect_robots: bool | None,
    allow_private: bool,
    domains: tuple[str, ...],
    timeout: float,
    output: IO[str] | None,
    with_body: bool,
    frontier: str,
    progress: bool | None,
    proxies: tuple[str, ...],
    headers: tuple[str, ...],
    cookies: tuple[str, ...],
    user_agent: str | None,
    event_loop: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Crawl from the seed URL(s), following links through the frontier, politely.

    Prints a summary at the end; with --output, every page as a JSON line. Defaults of the
    politeness options come from the settings (crawlherd.toml, CRAWLHERD_* variables).
    """
    from crawlherd.cli._common import Output
    from crawlherd.settings import load_settings

    if as_json and output is not None and getattr(output, "name", "") == "<stdout>":
        raise click.UsageError("--json prints the summary on stdout: write the pages to a file (-o FILE)")
    out = Output(quiet=quiet, as_json=as_json)
    if quiet or as_json:
        progress = False

    settings = load_settings(
        (ctx.find_root().obj or {}).get("config_file"),
        concurrency=concurrency,
        max_in_flight_per_host=per_host,
        delay=delay,
        respect_robots=respect_robots,
        event_loop=event_loop,
    )
    from crawlherd.crawler import CrawlerRunConfig
    from crawlherd.fetch.base import FetchLimits

    defaults = FetchLimits()
    limits = FetchLimits(
        user_agent=settings.user_agent,
        allow_private_addresses=allow_private or settings.allow_private_addresses,
        total_timeout=timeout,
        read_timeout=min(timeout, defaults.read_timeout),
        connect_timeout=min(timeout, defaults.connect_timeout),
    )
    try:
        config = CrawlerRunConfig(check_robots_txt=settings.respect_robots, concurrency=settings.concurrency,
                                  **_identity(proxies, headers, cookies, user_agent))
    except CrawlherdError as exc:
        raise click.BadParameter(str(exc), param_hint="--proxy") from None
    try:
        summary = run_async(
            _crawl(
                list(urls), limits, config, max_pages=max_pages, max_depth=max_depth, domains=domains,
                frontier=frontier, delay=settings.delay, per_host=settings.max_in_flight_per_host,
                output=output, with_body=with_body, progress=progress, out=out,
                status_interval=settings.status_interval,
            ),
            settings.event_loop,
        )
    except CrawlherdError as exc:
        raise click.ClickException(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):  # a second Ctrl+C ("aborting now")
        sys.exit(130)
    ok, total = summary.ok, summary.total
    lines = [
        f"crawled {total} page(s): {ok} ok, {total - ok} failed in {summary.elapsed:.1f} s "
        f"({summary.rate:.1f} pages/s)"
    ]
    for label, count in sorted(summary.statuses.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {label}: {count}")
        example = summary.examples.get(label)
        if example:
            lines.append(f"    e.g. {example}")
    stats = {
        "elapsed_seconds": round(summary.elapsed, 1),
        "pages/total": total,
        "pages/ok": ok,
        "pages/failed": total - ok,
        "pages/per_minute": round(summary.rate * 60, 1),
        **{f"status/{label}": count for label, count in summary.statuses.items()},
    }
    from crawlherd.cli._common import stats_dump

    out.info("\n".join(lines))
    out.info(stats_dump("statistics", stats, tty=out.tty))
    out.result("", {**stats, "examples": summary.examples})
    if ok == 0:
        click.echo("nothing could be crawled", err=True)
        sys.exit(1)


def _identity(
    proxies: tuple[str, ...], headers: tuple[str, ...], cookies: tuple[str, ...], user_agent: str | None
) -> dict[str, Any]:
    """``--proxy``, ``--header``, ``--cookie`` and ``--user-agent`` as CrawlerRunConfig options."""
    from crawlherd.crawler.proxies import RoundRobinProxyStrategy

    options: dict[str, Any] = {}
    if headers:
        pairs = [h.split(":", 1) for h in headers]
        if any(len(p) != 2 or not p[0].strip() for p in pairs):
            raise click.BadParameter("write 'Name: value'", param_hint="--header")
        options["headers"] = {k.strip(): v.strip() for k, v in pairs}
    if cookies:
        kv = [c.split("=", 1) for c in cookies]
        if any(len(p) != 2 or not p[0].strip() for p in kv):
            raise click.BadParameter("write name=value", param_hint="--cookie")
        options["cookies"] = {k.strip(): v.strip() for k, v in kv}
    if user_agent:
        options["user_agent"] = user_agent
    if len(proxies) == 1:
        options["proxy_config"] = proxies[0]
    elif proxies:
        options["proxy_rotation_strategy"] = RoundRobinProxyStrategy(list(proxies))
    return options


@dataclass(frozen=True)
class _Summary:
    ok: int
    total: int
    elapsed: float
    rate: float
    statuses: dict[str, int]
    examples: dict[str, str]  # label of a failure -> the first such error message


async def _crawl(
    urls: list[str],
    limits: FetchLimits,
    config: CrawlerRunConfig,
    *,
    max_pages: int,
    max_depth: int,
    domains: tuple[str, ...],
    frontier: str,
    delay: float,
    per_host: int,
    output: IO[str] | None,
    with_body: bool,
    progress: bool | None,
    out: Output,
    status_interval: float,
) -> _Summary:
    from collections import Counter

    from crawlherd.cli._common import Output, Rates, periodic_status
    from crawlherd.crawler import Crawler
    from crawlherd.crawler.concurrency import CrawlerMonitor, RateLimiter, SemaphoreDispatcher

    concurrency = config.concurrency
    monitor = CrawlerMonitor(enable_ui=progress if progress is not None else sys.stderr.isatty(),
                             concurrency=concurrency)
    dispatcher = SemaphoreDispatcher(
        concurrency, rate_limiter=RateLimiter(base_delay=(0.0, 0.0)), monitor=monitor
    )
    statuses: Counter[str] = Counter()
    examples: dict[str, str] = {}
    ok = total = 0
    rates = Rates()
    live = progress if progress is not None else sys.stderr.isatty()
    plain = Output(quiet=out.quiet or live, as_json=out.as_json, tty=False)  # status lines when no live view

    def line() -> str:
        return (
            f"{rates.line(total, 0).split(', items')[0]}, ok {ok}, failed {total - ok}"
        )

    from crawlherd.cli._signals import stop_on_signals, until_stopped

    stop = asyncio.Event()

    def waiting_for() -> str:
        return (
            f"{monitor.get_statistics()['in_flight']} page(s) in flight to be cancelled; then the summary and "
            "statistics of the pages crawled"
        )

    with stop_on_signals(stop, waiting_for):
        async with Crawler(limits=limits, config=config) as crawler, periodic_status(plain, line, status_interval):
            stream = await crawler.crawl(
                urls,
                max_pages=max_pages,
                max_depth=max_depth,
                allowed_domains=list(domains) or None,
                dispatcher=dispatcher,
                frontier=frontier,
                delay=delay,
                max_in_flight_per_host=per_host,
            )
            async with stream:
                async for result in until_stopped(stream, stop):
                    total += 1
                    ok += result.success
                    code = result.status_code
                    label = str(code) if code is not None else result.error_type or "error"
                    statuses[label] += 1
                    if not result.success and result.error_message and code is None:
                        examples.setdefault(label, result.error_message)
                    if output is not None:
                        output.write(json.dumps(result.to_dict(body=with_body), ensure_ascii=False) + "\n")
    elapsed = monitor.get_statistics()["elapsed"]
    # pages per second from the pages reported (the monitor also counts robots.txt fetches as tasks)
    return _Summary(ok, total, elapsed, total / elapsed if elapsed > 0 else 0.0, dict(statuses), examples)
