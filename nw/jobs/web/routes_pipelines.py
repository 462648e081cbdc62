"""``POST /api/pipelines``, ``GET /api/pipelines/{id}`` (and ``?job=<id>``: the
pipeline a job is a step of), its cancel and retry, ``POST
/api/pipelines/estimate``: one call of ``nw.jobs.api.pipelines`` each."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Route

from nw.jobs.api import pipeline_retry, pipelines
from nw.jobs.core.pipelines import Pipeline
from nw.jobs.web import state
from nw.jobs.web.inputs import body_text, json_object
from nw.jobs.web.responses import JSONResponse
from nw.project import Project

_FIELDS = ("project", "steps", "label", "actor", "approved")


def pipeline_json(pipeline: Pipeline, project: Project) -> dict[str, Any]:
    """A pipeline as the API answers it: each step's job as ``GET /api/jobs/{id}`` does."""
    out = {**pipeline.to_dict(), "project": str(project.root)}
    for step, read in zip(out["steps"], pipeline.steps, strict=True):
        step["job"] = state.job_json(read.job, project)
    return out


def _found(request: Request, pipeline_id: str) -> tuple[Project, Pipeline]:
    """The served project that holds the pipeline, and it (404 unknown)."""
    for project in state.projects(request).all:
        got = pipelines.get_pipeline(project, pipeline_id, config=state.config(request))
        if got is not None:
            return project, got
    raise HTTPException(404, f"no pipeline {pipeline_id}")


async def _body(request: Request) -> dict[str, Any]:
    body = json_object(await body_text(request), "the body", checked=False)
    extra = sorted(set(body) - set(_FIELDS))
    if extra:
        raise HTTPException(
            400, f"unknown field(s) {', '.join(extra)}; a pipeline has {', '.join(_FIELDS)}"
        )
    if not isinstance(body.get("steps"), dict):
        raise HTTPException(400, "'steps' must be a JSON object of step name to step")
    if not isinstance(body.get("approved", False), bool):
        raise HTTPException(400, "'approved' must be true or false")
    if body.get("label") is not None and not isinstance(body["label"], str):
        raise HTTPException(400, "'label' must be a string")
    return body


async def create_pipeline(request: Request) -> JSONResponse:
    """Enqueue a pipeline (202; 200 with ``created`` false for a resubmission);
    a refusal by the cost gate is 402, a bad step 400 naming it."""
    body = await _body(request)
    project = state.projects(request).one(body.get("project"))
    got = await run_in_threadpool(
        lambda: pipelines.enqueue_pipeline(
            project,
            body["steps"],
            label=body.get("label"),
            actor=body.get("actor"),
            approved=body.get("approved", False),
            config=state.config(request),
        )
    )
    return JSONResponse(pipeline_json(got, project), status_code=202 if got.created else 200)


async def estimate_pipeline(request: Request) -> JSONResponse:
    body = await _body(request)
    project = state.projects(request).one(body.get("project"))
    got = await run_in_threadpool(
        lambda: pipelines.estimate_pipeline(project, body["steps"], config=state.config(request))
    )
    return JSONResponse(got)


def get_pipeline(request: Request) -> JSONResponse:
    project, got = _found(request, request.path_params["pipeline_id"])
    return JSONResponse(pipeline_json(got, project))


def pipeline_of_job(request: Request) -> JSONResponse:
    """``GET /api/pipelines?job=<id>``: the pipeline a job is a step of (404: none)."""
    project, job = state.found_job(request, request.query_params.get("job") or "")
    if job.pipeline_id is None:
        raise HTTPException(404, f"job {job.job_id} is no pipeline's step")
    got = pipelines.get_pipeline(project, job.pipeline_id, config=state.config(request))
    if got is None:
        raise HTTPException(404, f"no pipeline {job.pipeline_id}")
    return JSONResponse(pipeline_json(got, project))


def cancel_pipeline(request: Request) -> JSONResponse:
    project, got = _found(request, request.path_params["pipeline_id"])
    done = pipelines.cancel_pipeline(project, got.pipeline_id, config=state.config(request))
    return JSONResponse(pipeline_json(done or got, project))


def retry_pipeline(request: Request) -> JSONResponse:
    project, got = _found(request, request.path_params["pipeline_id"])
    done = pipeline_retry.retry_pipeline(project, got.pipeline_id, config=state.config(request))
    return JSONResponse(pipeline_json(done or got, project), status_code=202)


routes = [
    Route("/api/pipelines", create_pipeline, methods=["POST"]),
    Route("/api/pipelines", pipeline_of_job, methods=["GET"]),
    Route("/api/pipelines/estimate", estimate_pipeline, methods=["POST"]),
    Route("/api/pipelines/{pipeline_id}", get_pipeline, methods=["GET"]),
    Route("/api/pipelines/{pipeline_id}/cancel", cancel_pipeline, methods=["POST"]),
    Route("/api/pipelines/{pipeline_id}/retry", retry_pipeline, methods=["POST"]),
]
