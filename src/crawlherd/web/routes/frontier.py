"""The frontier (``/frontier``): each live worker's hosts, as its heartbeat last reported them: which
wait on politeness, which back off, when each is ready next."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from starlette.requests import Request
from starlette.responses import Response

from crawlherd.console.overview import overview
from crawlherd.console.users import Action
from crawlherd.db.heartbeat import ProcessInfo
from crawlherd.frontier.base import HostState
from crawlherd.web.common import RouteTable, engine, render

__all__ = ["HostRow", "frontier_page", "host_rows", "routes"]

routes = RouteTable()


@dataclass(frozen=True, slots=True)
class HostRow:
    """One host of a worker's frontier as the Frontier page shows it: its state, and when (wall clock,
    from the heartbeat's time) it is ready next."""

    host: str
    state: HostState
    ready_at: datetime


def host_rows(p: ProcessInfo) -> list[HostRow]:
    """The hosts of a worker's frontier, from its heartbeat."""
    rows = []
    for host, values in p.info.get("frontier", {}).get("host_states", {}).items():
        st = HostState.from_summary(values)
        if st is not None:  # a worker of another version may write what this one cannot read
            rows.append(HostRow(host, st, p.last_seen + timedelta(seconds=st.ready_in)))
    return rows


@routes.get("/frontier", Action.READ)
async def frontier_page(request: Request) -> Response:
    o = await overview(engine(request))
    workers = [(p, host_rows(p)) for p in o.processes if p.kind == "worker"]
    return render(request, "frontier.html", workers=workers)
