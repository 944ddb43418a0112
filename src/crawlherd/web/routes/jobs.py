"""Jobs (``/jobs``): the job runs, filtered by status, website, target and time, paged (``?format=json``);
``/jobs/{run_id}``: one run with its attempts."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from crawlherd.console.jobs import JOB_STATUSES, JobFilter, get_job, list_jobs
from crawlherd.console.users import Action
from crawlherd.web.common import (
    PAGE,
    Listing,
    RouteTable,
    choice_param,
    engine,
    found,
    int_param,
    render,
    time_param,
)

__all__ = ["job_page", "jobs_page", "routes"]

routes = RouteTable()


@routes.get("/jobs", Action.READ)
async def jobs_page(request: Request) -> Response:
    listing = await Listing.read(request)
    p = listing.params
    flt = JobFilter(
        status=choice_param("status", p.get("status"), JOB_STATUSES),
        website=listing.website,
        target_id=int_param(p.get("target")),
        since=time_param(p.get("since")),
        until=time_param(p.get("until")),
        before_id=listing.before,
        limit=PAGE,
    )
    rows = await list_jobs(engine(request), flt)
    if p.get("format") == "json":
        return JSONResponse([r.as_dict() for r in rows])
    return render(request, "jobs.html", rows=rows, f=flt, statuses=JOB_STATUSES, **listing.context(rows))


@routes.get("/jobs/{run_id:int}", Action.READ)
async def job_page(request: Request) -> Response:
    job = await found(get_job(engine(request), int(request.path_params["run_id"])))
    return render(request, "job.html", job=job)
