"""The overview (``/``): the platform at a glance; ``/overview/live`` is the part the page refreshes,
``/overview.json`` the same as JSON."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crawlherd.console.overview import overview
from crawlherd.console.users import Action
from crawlherd.web.auth import needs
from crawlherd.web.common import engine, render

__all__ = ["overview_json", "overview_live", "overview_page", "routes"]


@needs(Action.READ)
async def overview_page(request: Request) -> Response:
    return render(request, "overview.html", o=await overview(engine(request)))


@needs(Action.READ)
async def overview_live(request: Request) -> Response:
    return render(request, "_overview_live.html", o=await overview(engine(request)))


@needs(Action.READ)
async def overview_json(request: Request) -> Response:
    return JSONResponse((await overview(engine(request))).as_dict())


routes = [
    Route("/", overview_page, methods=["GET"]),
    Route("/overview/live", overview_live, methods=["GET"]),
    Route("/overview.json", overview_json, methods=["GET"]),
]
