"""``/healthz``: answers ``ok`` while the console serves (outside the login wall, for load balancers)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from crawlherd.web.auth import OPEN, needs

__all__ = ["healthz", "routes"]


@needs(OPEN)
async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


routes = [Route("/healthz", healthz, methods=["GET"])]
