"""Jobs (``/jobs``): the job runs, filtered by status, website, target and time, paged (``?format=json``);
``/jobs/{run_id}``: one run with its attempts."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crawlherd.console.browse import website_names
from crawlherd.console.jobs import JOB_STATUSES, JobFilter, get_job, list_jobs
from crawlherd.console.users import Action
from crawlherd.web.auth import needs
from crawlherd.web.common import PAGE, choice_param, engine, found, int_param, next_key, render, time_param

__all__ = ["job_page", "jobs_page", "routes"]


@needs(Action.READ)
async def jobs_page(request: Request) -> Response:
    p = request.query_params
    names = await website_names(engine(request))
    flt = JobFilter(
        status=choice_param("status", p.get("status"), JOB_STATUSES),
        website=choice_param("website", p.get("website"), names),
        target_id=int_param(p.get("target")),
        since=time_param(p.get("since")),
        until=time_param(p.get("until")),
        before_id=int_param(p.get("before")),
        limit=PAGE,
    )
    rows = await list_jobs(engine(request), flt)
    if p.get("format") == "json":
        return JSONResponse([r.as_dict() for r in rows])
    return render(
        request, "jobs.html", rows=rows, f=flt, statuses=JOB_STATUSES, params=dict(p),
        websites=names, next_before=next_key(rows),
    )


@needs(Action.READ)
async def job_page(request: Request) -> Response:
    job = await found(get_job(engine(request), int(request.path_params["run_id"])))
    return render(request, "job.html", job=job)


routes = [
    Route("/jobs", jobs_page, methods=["GET"]),
    Route("/jobs/{run_id:int}", job_page, methods=["GET"]),
]
