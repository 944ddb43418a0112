"""The engine through a forward proxy: the same local pages (bench/crawl.py's site, its own process),
fetched at concurrency 64 through one loopback HTTP forward proxy (its own process, keep-alive on both
sides) by

- ``raw``: a bare aiohttp loop (``session.get(url, proxy=...)``) guarded by a semaphore: the baseline;
- ``crawlherd``: ``Crawler.arun_many(stream=True)`` with ``CrawlerRunConfig(proxy_config=...)`` (every
  request under the run's session: the proxy, its User-Agent) and a SemaphoreDispatcher(64).

Each client runs in its own subprocess on the asyncio loop; rounds interleave the two, and the ratio is
crawlherd's pages/s over raw's in the same round (median over rounds).

    .venv/bin/python bench/proxy.py                  # --pages 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

CONCURRENCY = 64
_HERE = Path(__file__).resolve().parent


def _site_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_crawl", _HERE / "crawl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the proxy (its own process) ----------------------------------------------------------------------


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One client connection: absolute-URI requests forwarded over one upstream keep-alive connection."""
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            line, _, rest = head.partition(b"\r\n")
            method, target, version = line.split(b" ", 2)
            url = urlsplit(target.decode())
            if upstream is None:
                upstream = await asyncio.open_connection(url.hostname, url.port or 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            kept = b"\r\n".join(h for h in rest.split(b"\r\n") if not h.lower().startswith(b"proxy-"))
            upstream[1].write(method + b" " + path.encode() + b" " + version + b"\r\n" + kept)
            await upstream[1].drain()
            answer = await upstream[0].readuntil(b"\r\n\r\n")
            length = 0
            for h in answer.split(b"\r\n"):
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":", 1)[1])
            body = await upstream[0].readexactly(length)
            writer.write(answer + body)
            await writer.drain()
    finally:
        writer.close()
        if upstream is not None:
            upstream[1].close()


def serve_proxy(port: int) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_relay, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


# -- the clients (each in its own process) --------------------------------------------------------------


async def run_raw(urls: list[str], proxy: str) -> int:
    import aiohttp

    ok = 0
    sem = asyncio.Semaphore(CONCURRENCY)
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(url: str) -> None:
            nonlocal ok
            async with sem, session.get(url, proxy=proxy) as r:
                await r.read()
                ok += r.status == 200

        await asyncio.gather(*(one(u) for u in urls))
    return ok


async def run_crawlherd(urls: list[str], proxy: str) -> int:
    from crawlherd import Crawler, CrawlerRunConfig
    from crawlherd.crawler.concurrency import SemaphoreDispatcher
    from crawlherd.fetch.base import FetchLimits

    ok = 0
    config = CrawlerRunConfig(proxy_config=proxy, user_agent="Mozilla/5.0 (bench)")
    async with Crawler(limits=FetchLimits(allow_private_addresses=True), max_connections=CONCURRENCY) as crawler:
        stream = await crawler.arun_many(urls, config=config, dispatcher=SemaphoreDispatcher(CONCURRENCY),
                                         stream=True)
        async for result in stream:
            ok += result.status_code == 200
    return ok


def client(kind: str, base: str, pages: int, proxy: str) -> None:
    urls = [f"{base}/p{i}.html" for i in range(pages)]
    run = run_raw if kind == "raw" else run_crawlherd
    import aiohttp  # noqa: F401 - imports are not what is measured

    if kind == "crawlherd":
        import crawlherd.crawler.concurrency  # noqa: F401
        import crawlherd.fetch.http  # noqa: F401
    started = time.perf_counter()
    cpu = time.process_time()
    ok = asyncio.run(run(urls, proxy))
    elapsed = time.perf_counter() - started
    cpu_us = (time.process_time() - cpu) / max(1, ok) * 1e6
    print(json.dumps({"ok": ok, "seconds": elapsed, "pages_per_s": ok / elapsed, "cpu_us_per_page": cpu_us}))


def measure(kind: str, base: str, pages: int, proxy: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--client", kind, "--base", base, "--pages", str(pages), "--proxy", proxy],
        check=True, capture_output=True, text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["ok"] != pages:
        raise RuntimeError(f"{kind}: {result['ok']} of {pages} pages fetched")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client", choices=("raw", "crawlherd"))
    parser.add_argument("--base")
    parser.add_argument("--proxy")
    parser.add_argument("--serve-proxy", type=int)
    args = parser.parse_args()
    if args.serve_proxy:
        serve_proxy(args.serve_proxy)
        return
    if args.client:
        client(args.client, args.base, args.pages, args.proxy)
        return
    site, site_port = _site_module().start_server(args.pages)
    proxy_port = _free_port()
    proxy_proc = subprocess.Popen([sys.executable, __file__, "--serve-proxy", str(proxy_port)])
    try:
        _wait_port(proxy_port)
        base, proxy = f"http://127.0.0.1:{site_port}", f"http://127.0.0.1:{proxy_port}"
        ratios, cpu = [], []
        for n in range(args.rounds):
            raw = measure("raw", base, args.pages, proxy)
            ours = measure("crawlherd", base, args.pages, proxy)
            ratios.append(ours["pages_per_s"] / raw["pages_per_s"])
            cpu.append((raw["cpu_us_per_page"], ours["cpu_us_per_page"]))
            print(f"round {n + 1}: raw aiohttp {raw['pages_per_s']:.0f} pages/s ({raw['cpu_us_per_page']:.0f} us "
                  f"CPU/page), crawlherd {ours['pages_per_s']:.0f} pages/s ({ours['cpu_us_per_page']:.0f} us), "
                  f"ratio {ratios[-1]:.2f}x", flush=True)
        raw_cpu, our_cpu = statistics.median(c[0] for c in cpu), statistics.median(c[1] for c in cpu)
        print(f"median ratio crawlherd / raw aiohttp through the same proxy: {statistics.median(ratios):.2f}x "
              f"(best round {max(ratios):.2f}x); client CPU per page {our_cpu:.0f} us vs {raw_cpu:.0f} us "
              f"({args.pages} pages, concurrency {CONCURRENCY}, {args.rounds} rounds)")
    finally:
        proxy_proc.kill()
        site.kill()
        proxy_proc.wait()
        site.wait()


if __name__ == "__main__":
    main()
