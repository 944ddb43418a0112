"""``python -m crawlherd.demo``: serve the demo job board until Ctrl+C (or SIGTERM)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal

import click

from crawlherd.demo.site import DemoSite

__all__ = ["serve"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: a free port.")
@click.option("--seed", type=int, default=42, show_default=True, help="The job board's seed.")
@click.option("--throttle-every", type=click.IntRange(0), default=4, show_default=True, help="1 in N URLs: 429 once.")
def serve(host: str, port: int, seed: int, throttle_every: int) -> None:
    """Serve the demo job board. Prints its URL, then one JSON line with its URL and totals.

    With --throttle-every N, about one /search URL in N answers its first request with 429 and
    Retry-After (0: never).
    """
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(DemoSite(seed=seed, throttle_every=throttle_every), host, port))


async def _serve(site: DemoSite, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await site.start(host, port)
    try:
        totals = site.totals()
        click.echo(f"demo site on {site.url}  ({totals['unique_jobs']} jobs, {totals['searches']} searches)")
        click.echo(json.dumps({"url": site.url, **totals}))
        await stop.wait()
    finally:
        await site.stop()


if __name__ == "__main__":
    serve(prog_name="python -m crawlherd.demo")
