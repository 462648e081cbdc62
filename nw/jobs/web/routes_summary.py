"""``/api/summary`` and its event stream: the tray's snapshot across the served projects."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nw.jobs.api import facade
from nw.jobs.web import state, streams
from nw.jobs.web.responses import JSONResponse


def snapshot(request: Request, actor: str | None) -> dict[str, Any]:
    served = state.projects(request)
    snap = facade.snapshot(served.all, actor=actor, config=state.config(request))
    return {**snap, "projects": served.describe()}


def summary(request: Request) -> JSONResponse:
    return JSONResponse(snapshot(request, request.query_params.get("actor") or None))


def summary_events(request: Request) -> Response:
    """The snapshot on each change: one connection for the whole tray (browsers allow
    six per host, so a stream per job would starve the page). Every tray watching
    the same actor shares one reader."""
    actor = request.query_params.get("actor") or None
    return streams.follow(
        request,
        ("summary", actor),
        lambda: snapshot(request, actor),
        state.projects(request).all,
        ticking=streams.tray_running,
    )


routes = [
    Route("/api/summary", summary, methods=["GET"]),
    Route("/api/summary/events", summary_events, methods=["GET"]),
]
