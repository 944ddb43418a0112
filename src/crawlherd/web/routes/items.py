"""Items (``/items``): the scraped items, filtered and paged; ``/items/export``: all of them (or one
website's) as a JSON Lines or CSV download."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from crawlherd.console.browse import browse_items, website_names
from crawlherd.console.users import Action
from crawlherd.sinks.export import FORMATS, export_items
from crawlherd.web.auth import needs
from crawlherd.web.common import PAGE, choice_param, engine, int_param, next_key, render

__all__ = ["items_export", "items_page", "routes"]


@needs(Action.READ)
async def items_page(request: Request) -> Response:
    p = request.query_params
    names = await website_names(engine(request))
    rows = await browse_items(
        engine(request), website=choice_param("website", p.get("website"), names), q=p.get("q", ""),
        location=p.get("location", ""),
        before_id=int_param(p.get("before")), limit=PAGE,
    )
    return render(
        request, "items.html", rows=rows, params=dict(p), websites=names,
        next_before=next_key(rows),
    )


@needs(Action.READ)
async def items_export(request: Request) -> Response:
    fmt = request.query_params.get("format", "jsonl")
    if fmt not in FORMATS:
        raise HTTPException(400, f"format must be one of {', '.join(FORMATS)}")
    out = io.StringIO()
    website = choice_param("website", request.query_params.get("website"), await website_names(engine(request)))
    await export_items(engine(request), out, fmt=fmt, website=website)
    media = "text/csv" if fmt == "csv" else "application/x-ndjson"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return Response(
        out.getvalue(), media_type=media,
        headers={"content-disposition": f'attachment; filename="items-{stamp}.{fmt}"'},
    )


routes = [
    Route("/items", items_page, methods=["GET"]),
    Route("/items/export", items_export, methods=["GET"]),
]
