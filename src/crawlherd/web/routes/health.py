"""``/healthz``: answers ``ok`` while the console serves (outside the login wall, for load balancers)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from crawlherd.web.auth import OPEN
from crawlherd.web.common import RouteTable

__all__ = ["healthz", "routes"]

routes = RouteTable()


@routes.get("/healthz", OPEN)
async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")
