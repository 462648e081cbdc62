"""The console's routes (``/work/wt/CONSOLE_API.md``): the history a page at a
time, one job's progress trail, retry (one or in bulk), totals and workers.

Each is one facade call per served project; several projects are merged
newest first, and a page's ``next`` is the id to pass as ``before=`` for the
page after it (wherever that job lives, the other projects continue from its
place in time).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nw.jobs.api import console, facade
from nw.jobs.core.ids import check_job_id
from nw.jobs.web import state
from nw.jobs.web.inputs import body_text, int_param, json_object
from nw.jobs.web.responses import JSONResponse

PAGE_MAX = 1000
_FILTERS = ("status", "kind", "actor", "grade", "q")


def list_jobs(request: Request) -> Response:
    """``{"jobs": [...], "next": id or null}``: newest first, filtered, from ``before``."""
    limit = int_param(request, "limit", 50, low=1, high=PAGE_MAX)
    query = request.query_params
    filters = {name: query.get(name) or None for name in _FILTERS}
    before = query.get("before") or None
    config = state.config(request)
    served = state.projects(request).pick(query.get("project"))
    cursor: str | tuple[float, str] | None = before
    if before is not None and len(served) > 1:  # the other projects continue from its time
        check_job_id(before)
        found = [c for p in served if (c := facade.cursor_of(p, before, config=config))]
        if not found:
            raise HTTPException(400, f"before: no job {before} in the served projects")
        cursor = found[0]

    def build() -> dict[str, Any]:
        rows: list[tuple[tuple[str, str], dict[str, Any]]] = []
        for project in served:
            jobs = facade.list_jobs(project, before=cursor, limit=limit, config=config, **filters)
            for job in jobs:
                when = job.created_at.isoformat() if job.created_at else ""
                rows.append(((when, job.job_id), state.job_json(job, project)))
        rows.sort(key=lambda r: r[0], reverse=True)
        page = [r for _, r in rows[:limit]]
        more = len(rows) >= limit and bool(page)
        return {"jobs": page, "next": page[-1]["job_id"] if more else None}

    # Pollers asking for the same page share one read until a job is written.
    key = ("jobs", tuple(sorted(query.multi_items())))
    return request.app.state.page_cache.answer(key, served, build)


def job_progress(request: Request) -> JSONResponse:
    """``{"progress": [beats, oldest first]}`` (the newest ``limit``)."""
    job_id = request.path_params["job_id"]
    limit = int_param(request, "limit", 200, low=1, high=10_000)
    project, _ = state.found_job(request, job_id)
    trail = facade.get_job_progress(project, job_id, limit=limit, config=state.config(request))
    return JSONResponse({"progress": trail})


async def retry_job(request: Request) -> JSONResponse:
    """202 the job's new run; 402 over budget; 400 not retryable; 404 unknown."""
    job_id = request.path_params["job_id"]
    raw = (await body_text(request)).strip()
    body = json_object(raw, "the body") if raw else {}
    approved = _flag(body, "approved")
    project, _ = await run_in_threadpool(state.found_job, request, job_id)
    job = await run_in_threadpool(
        lambda: console.retry_job(project, job_id, approved=approved, config=state.config(request))
    )
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    return JSONResponse(state.job_json(job, project), status_code=202)


async def retry_jobs(request: Request) -> JSONResponse:
    """Bulk retry: ``{status?, kind?, since?, approved?, project?}`` -> 202 ``{"jobs": [...]}``."""
    raw = (await body_text(request)).strip()
    body = json_object(raw, "the body") if raw else {}
    status = body.get("status", "failed")
    kind = body.get("kind")
    for name, value in (("status", status), ("kind", kind)):
        if value is not None and not isinstance(value, str):
            raise HTTPException(400, f"'{name}' must be a string")
    since = _since(body.get("since"))
    approved = _flag(body, "approved")
    config = state.config(request)
    served = state.projects(request).pick(body.get("project"))

    def run() -> list[dict[str, Any]]:
        out = []
        for project in served:
            jobs = console.retry_jobs(
                project, status=status, kind=kind, since=since, approved=approved, config=config
            )
            out += [state.job_json(job, project) for job in jobs]
        return out

    return JSONResponse({"jobs": await run_in_threadpool(run)}, status_code=202)


def totals(request: Request) -> JSONResponse:
    """The ``totals`` dict of one project (the first when several are served)."""
    project = state.projects(request).pick(request.query_params.get("project"))[0]
    data = console.totals(project, config=state.config(request))
    return JSONResponse({**data, "project": str(project.root)})


def workers(request: Request) -> JSONResponse:
    """``{"workers": [...]}`` of the served projects (or the one named)."""
    config = state.config(request)
    out = []
    for project in state.projects(request).pick(request.query_params.get("project")):
        out += [
            {**w, "project": str(project.root)} for w in console.workers(project, config=config)
        ]
    return JSONResponse({"workers": out})


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise HTTPException(400, f"'{name}' must be true or false")
    return value


def _since(value: Any) -> float | None:
    """Epoch seconds, or an ISO 8601 time with its zone."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise HTTPException(400, "'since' must be epoch seconds or an ISO 8601 time")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise HTTPException(400, f"'since' is not an ISO 8601 time: {value!r}") from None
        if when.tzinfo is None:
            raise HTTPException(400, "'since' needs a time zone (e.g. 2026-12-01T00:00:00Z)")
        return when.timestamp()
    raise HTTPException(400, "'since' must be epoch seconds or an ISO 8601 time")


routes = [
    Route("/api/jobs", list_jobs, methods=["GET"]),
    # Before /api/jobs/{job_id}: "retry" is not a job id.
    Route("/api/jobs/retry", retry_jobs, methods=["POST"]),
    Route("/api/jobs/{job_id}/progress", job_progress, methods=["GET"]),
    Route("/api/jobs/{job_id}/retry", retry_job, methods=["POST"]),
    Route("/api/totals", totals, methods=["GET"]),
    Route("/api/workers", workers, methods=["GET"]),
]
