"""``/api/jobs``, one job, its events, and ``/api/estimate``: each a facade call.

Sync endpoints run on Starlette's thread pool (the facade blocks on the store).
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nw.jobs.api import facade
from nw.jobs.core import kinds
from nw.jobs.web import state, streams
from nw.jobs.web.inputs import body_text, json_array, json_object
from nw.jobs.web.responses import JSONResponse


def get_job(request: Request) -> JSONResponse:
    project, job = state.found_job(request, request.path_params["job_id"])
    return JSONResponse(state.job_json(job, project))


def cancel_job(request: Request) -> JSONResponse:
    job_id = request.path_params["job_id"]
    project, _ = state.found_job(request, job_id)
    job = facade.cancel_job(project, job_id, config=state.config(request))
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    return JSONResponse(state.job_json(job, project))


def estimate(request: Request) -> JSONResponse:
    kind = request.query_params.get("kind")
    if not kind:
        raise HTTPException(400, "kind is required")
    # a job's fields are the facade's door's to judge (it names the field)
    params = json_object(request.query_params.get("params") or "{}", "params", checked=False)
    project = state.projects(request).one(request.query_params.get("project"))
    quoted = facade.estimate(project, kind, params, config=state.config(request))
    from nw.jobs.core.kinds import kind_spec, registered_kinds

    if kind_spec(kind) is None:  # as the CLI's estimate: only a kind this server can start
        known = ", ".join(registered_kinds()) or "none"
        raise HTTPException(400, f"unknown kind {kind!r}; known kinds: {known}")
    return JSONResponse(quoted)


async def create_job(request: Request) -> JSONResponse:
    """Enqueue a registered kind (202); a refusal by the cost gate is 402.

    A JSON array of such bodies (without ``project``/``approved``, which are
    then query parameters) is one ``enqueue_many``: all or nothing, answered
    ``{"jobs": [...]}`` in order; a bad element is a 400 naming it (``item N``)."""
    text = await body_text(request)
    if text.lstrip().startswith("["):
        return await _create_many(request, text)
    body = json_object(text, "the body", checked=False)  # the facade's door names the field
    kind, params = _enqueue_request(body)
    project = state.projects(request).one(body.get("project"))
    job = await run_in_threadpool(
        lambda: facade.enqueue(
            project,
            kind,
            params,
            idempotency_key=body.get("idempotency_key"),
            label=body.get("label"),
            actor=body.get("actor"),
            approved=body.get("approved", False),
            config=state.config(request),
        )
    )
    return JSONResponse(state.job_json(job, project), status_code=202)


_ITEM_KEYS = ("kind", "params", "idempotency_key", "label", "actor")


async def _create_many(request: Request, text: str) -> JSONResponse:
    items = json_array(text, "the body", checked=False)  # the facade's door names the field
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise HTTPException(400, f"item {n}: must be a JSON object")
        extra = sorted(set(item) - set(_ITEM_KEYS))
        if extra:
            batch_level = set(extra) & {"project", "approved"}
            where = " (a query parameter for a list)" if batch_level else ""
            raise HTTPException(400, f"item {n}: unknown field(s) {', '.join(extra)}{where}")
        try:
            _enqueue_request(item)
        except HTTPException as exc:
            raise HTTPException(400, f"item {n}: {exc.detail}") from None
    approved = request.query_params.get("approved", "false")
    if approved not in ("true", "false"):
        raise HTTPException(400, "approved must be true or false")
    project = state.projects(request).one(request.query_params.get("project"))
    got = await run_in_threadpool(
        lambda: facade.enqueue_many(
            project,
            [{"params": {}, **item} for item in items],
            approved=approved == "true",
            config=state.config(request),
        )
    )
    return JSONResponse({"jobs": [state.job_json(job, project) for job in got]}, status_code=202)


def _enqueue_request(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The kind and params of a POST body, or a 400 naming what is wrong."""
    kind = body.get("kind")
    if not isinstance(kind, str) or not kind:
        raise HTTPException(400, "'kind' is required")
    if kinds.kind_spec(kind) is None:  # the web runs no bodies: only a worker's kinds
        known = ", ".join(kinds.registered_kinds()) or "none"
        raise HTTPException(400, f"kind {kind!r} is not registered; registered: {known}")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise HTTPException(400, "'params' must be a JSON object")
    for name in ("idempotency_key", "label"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise HTTPException(400, f"'{name}' must be a string")
    if not isinstance(body.get("approved", False), bool):
        raise HTTPException(400, "'approved' must be true or false")
    return kind, params


async def job_events(request: Request) -> Response:
    """The job's ``to_dict`` on each change, until it ends (one reader per job,
    however many pages watch it)."""
    job_id = request.path_params["job_id"]
    project, _ = await run_in_threadpool(state.found_job, request, job_id)
    config = state.config(request)

    def read() -> streams.Data:
        job = facade.get_job(project, job_id, config=config)
        return None if job is None else state.job_json(job, project)

    return streams.follow(
        request,
        ("job", job_id),
        read,
        [project],
        ticking=streams.job_running,
        done=streams.job_ended,
    )


routes = [
    Route("/api/jobs", create_job, methods=["POST"]),
    Route("/api/jobs/{job_id}", get_job, methods=["GET"]),
    Route("/api/jobs/{job_id}/cancel", cancel_job, methods=["POST"]),
    Route("/api/jobs/{job_id}/events", job_events, methods=["GET"]),
    Route("/api/estimate", estimate, methods=["GET"]),
]
