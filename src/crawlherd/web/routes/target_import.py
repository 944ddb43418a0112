"""``/targets/import``: a targets file (TOML or YAML), uploaded or pasted, applied as ``crawlherd
targets import`` applies it; its problems shown line by line."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from crawlherd.console import editing
from crawlherd.console.users import Action
from crawlherd.errors import CrawlherdError, TargetsFileError
from crawlherd.web.auth import actor, checked_form
from crawlherd.web.common import RouteTable, engine, render

__all__ = ["import_page", "import_post", "routes"]

routes = RouteTable()


@routes.get("/targets/import", Action.IMPORT)
async def import_page(request: Request) -> Response:
    return render(request, "import.html", errors=[], text="", result=None)


@routes.post("/targets/import", Action.IMPORT)
async def import_post(request: Request) -> Response:
    form = await checked_form(request)
    try:
        upload = form.get("file")
        if upload is not None and not isinstance(upload, str) and upload.filename:
            filename = upload.filename
            text = (await upload.read()).decode("utf-8", errors="replace")
        else:
            text = str(form.get("text", ""))
            filename = "pasted." + ("yaml" if form.get("format") == "yaml" else "toml")
    finally:
        await form.close()
    try:
        result = await editing.import_text(engine(request), text, filename=filename, actor=actor(request))
    except TargetsFileError as exc:
        return render(request, "import.html", status=400, errors=exc.problems, text=text, result=None)
    except CrawlherdError as exc:
        return render(request, "import.html", status=400, errors=[("(file)", str(exc))], text=text, result=None)
    return render(request, "import.html", errors=[], text="", result=result)
