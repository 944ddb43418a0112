"""The console's endpoints and helpers called directly, without a database or a server: the endpoints
are module-level functions that reach the app's state through ``request.app.state``."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request

from crawlherd.console.editing import FormError
from crawlherd.db.heartbeat import ProcessInfo
from crawlherd.errors import CrawlherdError
from crawlherd.frontier.base import HostState
from crawlherd.web.app import create_app
from crawlherd.web.common import PAGE, back, form_errors, int_param, next_key, time_param
from crawlherd.web.routes import health, login
from crawlherd.web.routes.frontier import host_rows
from crawlherd.web.routes.schedules import schedule_fields
from crawlherd.web.routes.websites import _website_values


def _request(app: Starlette, path: str, query: str = "") -> Request:
    scope: dict[str, Any] = {
        "type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
        "headers": [], "app": app, "router": app.router, "session": {}, "state": {},
        "scheme": "http", "server": ("127.0.0.1", 80), "root_path": "",
    }
    return Request(scope)


async def test_an_endpoint_renders_with_the_apps_state_and_a_session_token() -> None:
    engine = create_async_engine("sqlite+aiosqlite://")  # never connected: the login page reads no DB
    try:
        app = create_app(engine, title="console-under-test")
        request = _request(app, "/login", "next=/jobs")
        response = await login.login_page(request)
        page = bytes(response.body).decode()
        assert response.status_code == 200
        assert response.context["title"] == "console-under-test"  # type: ignore[attr-defined]
        assert 'value="/jobs"' in page
        assert request.session["csrf"] in page  # the form carries the session's CSRF token
        assert bytes((await health.healthz(request)).body) == b"ok"
    finally:
        await engine.dispose()


def test_back_redirects_with_a_flash() -> None:
    assert back("/targets", "saved").headers["location"] == "/targets?flash=saved"
    assert back("/jobs?status=dead", "x").headers["location"] == "/jobs?status=dead&flash=x"
    assert back("/audit").status_code == 303


def test_query_parsing_refuses_what_is_not_a_number_or_a_time() -> None:
    assert int_param("") is None and int_param("12") == 12
    assert time_param("2026-01-31T07:00") == datetime(2026, 1, 31, 7, tzinfo=UTC)
    assert time_param("2026-01-31T07:00+01:00") == datetime(2026, 1, 31, 6, tzinfo=UTC)
    for bad in (lambda: int_param("x"), lambda: time_param("yesterday")):
        with pytest.raises(HTTPException) as caught:
            bad()
        assert caught.value.status_code == 400


def test_next_key_only_after_a_full_page() -> None:
    class Row:
        def __init__(self, id: int) -> None:
            self.id = id

    assert next_key([Row(i) for i in range(PAGE)]) == PAGE - 1
    assert next_key([Row(1)]) is None


async def test_form_errors_maps_what_the_model_refused() -> None:
    async def refused() -> None:
        raise FormError({"name": "required"})

    async def broken() -> None:
        raise CrawlherdError("no such website")

    async def fine() -> None:
        return None

    assert await form_errors(refused) == {"name": "required"}
    assert await form_errors(broken) == {"form": "no such website"}
    assert await form_errors(fine) is None


def test_form_fields_become_spec_values() -> None:
    assert schedule_fields({"cron": " 0 7 * * * ", "every": "1h"}) == {"cron": "0 7 * * *"}
    assert schedule_fields({"every": "90", "jitter": "5m"}) == {"every": 90.0, "jitter": "5m"}
    values = _website_values({"name": " s ", "pagination_type": "param", "pagination_param": "page"})
    assert values["name"] == "s"
    assert values["pagination"] == {"type": "param", "param": "page"}
    with pytest.raises(FormError) as caught:
        _website_values({"name": "s", "extraction": "{not json"})
    assert "extraction" in caught.value.problems


def test_host_rows_skip_what_this_version_cannot_read() -> None:
    seen = datetime(2026, 1, 1, tzinfo=UTC)
    good = HostState(queued=2, in_flight=1, max_in_flight=2, delay=1.0, ready_in=3.0)
    info = {"frontier": {"host_states": {"a.example": asdict(good), "b.example": {"queued": "many"}}}}
    worker = ProcessInfo(
        id="w1", kind="worker", host="h", pid=1, version="0", started_at=seen, last_seen=seen, jobs_in_hand=1,
        state="alive", info=info,
    )
    rows = host_rows(worker)
    assert [r.host for r in rows] == ["a.example"]
    assert rows[0].ready_at == seen + timedelta(seconds=3)
