"""Items (``/items``): the scraped items, filtered and paged; ``/items/export``: all of them (or one
website's) as a JSON Lines or CSV download."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from crawlherd.console.browse import browse_items
from crawlherd.console.users import Action
from crawlherd.sinks.export import FORMATS, export_items
from crawlherd.web.common import PAGE, Listing, RouteTable, engine, render, website_filter

__all__ = ["items_export", "items_page", "routes"]

routes = RouteTable()


@routes.get("/items", Action.READ)
async def items_page(request: Request) -> Response:
    listing = await Listing.read(request)
    rows = await browse_items(
        engine(request), website=listing.website, q=listing.params.get("q", ""),
        location=listing.params.get("location", ""), before_id=listing.before, limit=PAGE,
    )
    return render(request, "items.html", rows=rows, **listing.context(rows))


@routes.get("/items/export", Action.READ)
async def items_export(request: Request) -> Response:
    fmt = request.query_params.get("format", "jsonl")
    if fmt not in FORMATS:
        raise HTTPException(400, f"format must be one of {', '.join(FORMATS)}")
    out = io.StringIO()
    website, _names = await website_filter(request)
    await export_items(engine(request), out, fmt=fmt, website=website)
    media = "text/csv" if fmt == "csv" else "application/x-ndjson"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return Response(
        out.getvalue(), media_type=media,
        headers={"content-disposition": f'attachment; filename="items-{stamp}.{fmt}"'},
    )
