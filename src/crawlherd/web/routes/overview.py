"""The overview (``/``): the platform at a glance; ``/overview/live`` is the part the page refreshes,
``/overview.json`` the same as JSON."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from crawlherd.console.overview import overview
from crawlherd.console.users import Action
from crawlherd.web.common import RouteTable, engine, render

__all__ = ["overview_json", "overview_live", "overview_page", "routes"]

routes = RouteTable()


@routes.get("/", Action.READ)
async def overview_page(request: Request) -> Response:
    return render(request, "overview.html", o=await overview(engine(request)))


@routes.get("/overview/live", Action.READ)
async def overview_live(request: Request) -> Response:
    return render(request, "_overview_live.html", o=await overview(engine(request)))


@routes.get("/overview.json", Action.READ)
async def overview_json(request: Request) -> Response:
    return JSONResponse((await overview(engine(request))).as_dict())
