"""The audit trail (``/audit``): every change made from the console or the CLI, newest first, paged."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from crawlherd.console.audit import list_audit
from crawlherd.console.users import Action
from crawlherd.web.common import RouteTable, engine, int_param, render

__all__ = ["audit_page", "routes"]

routes = RouteTable()


@routes.get("/audit", Action.READ)
async def audit_page(request: Request) -> Response:
    rows = await list_audit(engine(request), limit=200, before_id=int_param(request.query_params.get("before")))
    return render(request, "audit.html", rows=rows)
