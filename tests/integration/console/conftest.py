"""The console's fixtures: a migrated SQLite config DB, the app behind an httpx client, and a way to
fill in forms (with their CSRF token) as a browser does."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.web.app import create_app
from tests.support.db import open_engine

_CSRF = re.compile(r'name="csrf(?:-token)?" (?:value|content)="([^"]+)"')


@pytest.fixture
def db_url(sqlite_db_url: str) -> str:
    return sqlite_db_url


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    async for engine in open_engine(db_url):
        yield engine


class Browser:
    """An httpx client on the console that keeps its session cookie and reads CSRF tokens from pages."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def get(self, path: str, **kwargs: object) -> httpx.Response:
        return await self.client.get(path, **kwargs)  # type: ignore[arg-type]

    async def token(self, page: str = "/") -> str:
        response = await self.client.get(page, follow_redirects=True)
        found = _CSRF.search(response.text)
        assert found, f"no CSRF token on {page}"
        return found.group(1)

    async def post(
        self, path: str, data: dict[str, object] | None = None, *, page: str = "/", **kw: object
    ) -> httpx.Response:
        form = {"csrf": await self.token(page), **(data or {})}
        return await self.client.post(path, data=form, **kw)  # type: ignore[arg-type]

    async def login(self, name: str, password: str) -> httpx.Response:
        return await self.post("/login", {"name": name, "password": password, "next": "/"}, page="/login")


@pytest.fixture
async def browser(engine: AsyncEngine) -> AsyncIterator[Browser]:
    app = create_app(engine)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield Browser(client)
