"""Real sites (issue 21): the anti-bot job board crawled by ``crawlherd run`` through three proxies, with a
login that lapses; with no proxy, the honest outcome; the credentials in no output."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from click.testing import CliRunner
from sqlalchemy import select

from crawlherd.cli import main as cli
from crawlherd.db import JobRun, StoredItem, create_engine
from crawlherd.metrics import exposition
from tests.servers.antibot import AntiBotBoard
from tests.servers.proxies import LoopbackProxy, start_http_proxy, start_socks5_proxy
from tests.support.httpserver import Served, start_app

pytestmark = pytest.mark.timeout(120)

USER = "crawler-7f3e"
PASSWORD = "pw-Zq81-very-secret"
KEYWORD = "python"


@pytest.fixture
async def proxies() -> AsyncIterator[list[LoopbackProxy]]:
    made = [
        await start_http_proxy("127.0.0.2"),
        await start_http_proxy("127.0.0.3", auth="alice:proxy-pw-Aa1"),
        await start_socks5_proxy("127.0.0.4", auth="bob:socks-pw-Bb2"),
    ]
    yield made
    for p in made:
        await p.close()


async def _serve(board: AntiBotBoard) -> Served:
    return await start_app(board.app())


def _targets(url: str, proxies: list[str], *, cool_off: float = 1.2, delay: float = 0.05) -> dict[str, Any]:
    fetch: dict[str, Any] = {
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64) crawlherd-test",
        "headers": {"Accept-Language": "en"},
        "ban": {"markers": ["(?i)are you human"], "cool_off": f"{cool_off}s"},
        "login": {
            "url": f"{url}/login",
            "secrets": {"user": "env:BOARD_USER", "password": "env:BOARD_PASSWORD"},
            "success_marker": "Welcome back",
        },
    }
    if proxies:
        fetch["proxies"] = proxies
    return {
        "websites": [{
            "name": "antibot",
            "base_url": url,
            "search_url_template": url + "/search?q={keywords}",
            "pagination": {"type": "page_param", "param": "page", "max_pages": 10},
            "extraction": {
                "item_selector": "article.job",
                "item_url": "a.link@href",
                "fields": {"title": "h2.title"},
                "detail_fields": {"salary": ".salary"},
            },
            "politeness": {"min_delay": delay, "max_concurrency": 2, "robots": "ignore"},
            "fetch": fetch,
        }],
        "targets": [{"website": "antibot", "keywords": [KEYWORD], "locations": [""], "every": "1d"}],
    }


async def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, document: dict[str, Any],
               *extra: str) -> tuple[Any, list[str]]:
    """``targets import``, ``targets run 1`` and ``run --until-idle`` in process; the run's result and
    every log line (DEBUG) it wrote."""
    monkeypatch.chdir(tmp_path)
    for var in ("CRAWLHERD_DATABASE_URL", "CRAWLHERD_BROKER_URL", "CRAWLHERD_FRONTIER_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("BOARD_USER", USER)
    monkeypatch.setenv("BOARD_PASSWORD", PASSWORD)
    (tmp_path / "targets.toml").write_text(tomli_w.dumps(document), encoding="utf-8")
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(cli, list(args))

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.DEBUG)
    try:
        assert (r := await asyncio.to_thread(invoke, "targets", "import", "targets.toml")).exit_code == 0, r.output
        assert (r := await asyncio.to_thread(invoke, "targets", "run", "1")).exit_code == 0, r.output
        ran = await asyncio.to_thread(invoke, "run", "--until-idle", "--allow-private", "--interval", "0.2",
                                      "--no-console", "--json", *extra)
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    return ran, lines


async def _stored(tmp_path: Path) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str | None]]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'crawlherd.db'}")
    try:
        async with engine.connect() as conn:
            items = (await conn.execute(select(StoredItem.url, StoredItem.data))).all()
            runs = (await conn.execute(select(JobRun.status, JobRun.error))).all()
    finally:
        await engine.dispose()
    found = {url.split("://", 1)[1].split("/", 1)[1]: fields for url, fields in items}
    return {"/" + k: v for k, v in found.items()}, [(s, e) for s, e in runs]


async def test_the_antibot_board_through_three_proxies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxies: list[LoopbackProxy]
) -> None:
    board = AntiBotBoard(USER, PASSWORD, pages=5, limit=6, block_for=1.0, session_pages=1)
    served = await _serve(board)
    try:
        # the proxies' passwords named, as the login's: read by the worker when it sends
        monkeypatch.setenv("PROXY_PW_1", "proxy-pw-Aa1")
        monkeypatch.setenv("PROXY_PW_2", "socks-pw-Bb2")
        urls = [proxies[0].url, proxies[1].url.replace("proxy-pw-Aa1", "{env:PROXY_PW_1}"),
                proxies[2].url.replace("socks-pw-Bb2", "{env:PROXY_PW_2}")]
        ran, logs = await _run(tmp_path, monkeypatch, _targets(served.url, urls))
    finally:
        await served.close()
    assert ran.exit_code == 0, ran.output
    items, runs = await _stored(tmp_path)
    assert runs == [("succeeded", None)]
    truth = board.truth(KEYWORD)
    assert set(items) == set(truth)
    for path, fields in truth.items():
        assert items[path]["title"] == fields["title"]
        assert items[path]["salary"] == fields["salary"]
    identities = {p.source for p in proxies}
    assert {h.identity for h in board.log} == identities  # nothing went around the proxies
    # blocks happened, and a blocked identity was rested and then served again after its block
    assert board.blocks
    for who, start, until in board.blocks:
        during = [h for h in board.log if h.identity == who and start < h.at < until]
        assert len(during) <= 2, (who, during)  # at most what was in flight when the block came
    reused = [b for b in board.blocks if any(h.identity == b[0] and h.at >= b[2] and h.answer == "ok"
                                             for h in board.log)]
    assert reused
    # the login: made, and made again after a lapse, once per lapse -- not per request
    logins = [h for h in board.log if h.answer == "login"]
    expired = {h.sid for h in board.log if h.answer == "expired"}
    assert logins and len(logins) < len([h for h in board.log if h.answer == "ok"]) / 3
    assert not [h for h in board.log if h.answer in ("bad-ua", "login-failed")]
    print(f"logins {len(logins)} blocks {len(board.blocks)} expired {len(expired)} hits {len(board.log)}")
    assert expired  # sessions lapsed ...
    # ... and each lapse was logged in again once: a login per session made (one per proxy, and one
    # after each block retired a session) plus one per lapse, not one per request
    assert len(logins) <= len(proxies) + len(board.blocks) + len(expired)
    console = await _console_website_page(tmp_path)
    assert "Tier <b>" in console and 'id="website-proxies"' in console
    assert "127.0.0.1:" in console and "alice:***@" in console  # each proxy's row, its password hidden
    assert "retired: blocked: " in console  # the sessions a ban retired
    metrics_text = exposition().decode()
    assert 'crawlherd_proxy_fetches_total{outcome="blocked",proxy="' in metrics_text
    _no_credentials(tmp_path, ran.output + console, logs, proxies)


async def _console_website_page(tmp_path: Path) -> str:
    """The console's page of the website, with a worker's heartbeat reporting the run's sessions (read
    back from the run's sessions store, beside its frontier)."""
    import httpx

    from crawlherd.db.heartbeat import Heartbeat
    from crawlherd.sessions import open_sessions
    from crawlherd.web.app import create_app
    from crawlherd.worker.sessions import SessionPool

    engine = create_engine(f"sqlite:///{tmp_path / 'crawlherd.db'}")
    try:
        async with open_sessions(f"sqlite:///{tmp_path / 'crawlherd-frontier.db'}") as store:
            pool = SessionPool(store, send=None)  # type: ignore[arg-type]
            pool.sites.add("antibot")
            summary = await pool.summary()
        assert summary["antibot"]["proxies"]
        await Heartbeat(engine, kind="worker", name="w1", interval=3600, info={"sessions": summary}).register()
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            page = await client.get("/websites/1")
        assert page.status_code == 200, page.text
        return page.text
    finally:
        await engine.dispose()


def _no_credentials(tmp_path: Path, output: str, logs: list[str], proxies: list[LoopbackProxy]) -> None:
    secrets = [PASSWORD, "proxy-pw-Aa1", "socks-pw-Bb2"]
    places = {"--json output": output, "DEBUG logs": "\n".join(logs), "metrics": exposition().decode()}
    for f in tmp_path.iterdir():  # the config DB (websites, job messages, outbox, runs, items), the frontier
        if f.is_file():
            places[f.name] = f.read_bytes().decode("latin-1")
    for name, text in places.items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} found in {name}"
    assert USER not in places["DEBUG logs"]


async def test_without_a_proxy_the_job_ends_blocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    board = AntiBotBoard(USER, PASSWORD, pages=3, limit=2, block_for=30.0)
    served = await _serve(board)
    try:
        ran, _ = await _run(tmp_path, monkeypatch, _targets(served.url, [], cool_off=0.3), "--max-attempts", "1")
    finally:
        await served.close()
    assert ran.exit_code == 0, ran.output
    items, runs = await _stored(tmp_path)
    [(status, error)] = runs
    assert status == "dead"
    assert error is not None and error.startswith("blocked: HTTP 403"), error
    assert "every proxy tier" in error
    stats = json.loads(ran.stdout)
    assert any("blocked: HTTP 403" in e for e in stats["last_errors"]), stats["last_errors"]
    # what was stored came from the pages really served (the first listing page); no captcha page was
    # stored as a detail page's success
    truth = board.truth(KEYWORD)
    assert items and set(items) <= set(truth)
    assert all("salary" not in fields for fields in items.values())
    assert all("human" not in json.dumps(fields) for fields in items.values())
    explained = await asyncio.to_thread(CliRunner().invoke, cli, ["explain", "1", "--json"])
    assert explained.exit_code == 0, explained.output
    assert "blocked: HTTP 403" in explained.stdout
