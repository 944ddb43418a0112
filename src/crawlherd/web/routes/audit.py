"""The audit trail (``/audit``): every change made from the console or the CLI, newest first, paged."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from crawlherd.console.audit import list_audit
from crawlherd.console.users import Action
from crawlherd.web.auth import needs
from crawlherd.web.common import engine, int_param, render

__all__ = ["audit_page", "routes"]


@needs(Action.READ)
async def audit_page(request: Request) -> Response:
    rows = await list_audit(engine(request), limit=200, before_id=int_param(request.query_params.get("before")))
    return render(request, "audit.html", rows=rows)


routes = [Route("/audit", audit_page, methods=["GET"])]
