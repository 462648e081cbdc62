"""The same app in plain Starlette: the jobs app in a Mount, thin async routes."""

import contextlib
import os

import renders  # noqa: F401  (registers the film.* kinds that workers run)
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

import nw
from nw import jobs
from nw.jobs import aio  # the facade's calls, awaitable: the loop never blocks
from nw.jobs.web import create_app

PROJECT = nw.Project.init(os.environ.get("FILM_PROJECT", "my-film"))  # created if missing
jobs_app = create_app([PROJECT], token=os.environ["NW_JOBS_TOKEN"])


async def animate_clip(request):
    body = await request.json()
    params = {"model": "kling", "operation": "image_to_video", "duration_s": 5}
    try:
        job = await aio.enqueue(PROJECT, "film.animate", {**params, **body})
    except jobs.InvalidInput as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse(jobs.to_dict(job), status_code=202)


async def clip(request):
    job = await aio.get_job(PROJECT, request.path_params["job_id"])
    if job is None:
        return JSONResponse({"error": "no such job"}, status_code=404)
    return JSONResponse(jobs.to_dict(job))


async def clip_done(request):  # waits for the end, woken by the store: no polling
    timeout = float(request.query_params.get("timeout", "60"))
    try:
        job = await aio.wait(PROJECT, request.path_params["job_id"], timeout=timeout)
    except TimeoutError:
        return JSONResponse({"error": f"not done after {timeout:g} s"}, status_code=408)
    return JSONResponse(jobs.to_dict(job))


@contextlib.asynccontextmanager
async def lifespan(app):
    async with jobs_app.router.lifespan_context(jobs_app):  # the jobs app's reaper
        yield


app = Starlette(
    routes=[
        Route("/clips", animate_clip, methods=["POST"]),
        Route("/clips/{job_id}", clip),
        Route("/clips/{job_id}/done", clip_done),
        Mount("/jobs", app=jobs_app),
    ],
    lifespan=lifespan,
)
