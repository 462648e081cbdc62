"""A FastAPI app that mounts the jobs API and tray, beside its own thin routes."""

import contextlib
import os
from typing import Any

import renders  # noqa: F401  (registers the film.* kinds that workers run)
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse

import nw
from nw import jobs
from nw.jobs import aio  # the facade's calls, awaitable: the loop never blocks
from nw.jobs.web import create_app

PROJECT = nw.Project.init(os.environ.get("FILM_PROJECT", "my-film"))  # created if missing
jobs_app = create_app([PROJECT], token=os.environ["NW_JOBS_TOKEN"])


@contextlib.asynccontextmanager
async def lifespan(app):
    # A mounted app's lifespan is not run by its parent: enter it here, so its
    # reaper keeps the project honest while the app is up.
    async with jobs_app.router.lifespan_context(jobs_app):
        yield


app = FastAPI(lifespan=lifespan)
app.mount("/jobs", jobs_app)  # the tray at /jobs/, its JSON API at /jobs/api/...


@app.exception_handler(jobs.InvalidInput)
async def bad_input(request, exc):
    return JSONResponse({"error": str(exc)}, status_code=400)


@app.exception_handler(jobs.BudgetExceeded)
async def over_budget(request, exc):
    return JSONResponse({"error": str(exc)}, status_code=402)


@app.post("/clips", status_code=202)
async def animate_clip(body: dict[str, Any]):
    params = {"model": "kling", "operation": "image_to_video", "duration_s": 5}
    job = await aio.enqueue(PROJECT, "film.animate", {**params, **body})
    return jobs.to_dict(job)


@app.get("/clips/{job_id}")
async def clip(job_id: str):
    job = await aio.get_job(PROJECT, job_id)
    if job is None:
        raise HTTPException(404, "no such job")
    return jobs.to_dict(job)


@app.get("/clips/{job_id}/done")
async def clip_done(job_id: str, timeout: float = 60):  # woken by the store: no polling
    try:
        return jobs.to_dict(await aio.wait(PROJECT, job_id, timeout=timeout))
    except TimeoutError:
        raise HTTPException(408, f"not done after {timeout:g} s") from None


@app.post("/clips/{job_id}/cancel")
async def cancel_clip(job_id: str):
    job = await aio.cancel_job(PROJECT, job_id)
    if job is None:
        raise HTTPException(404, "no such job")
    return jobs.to_dict(job)
