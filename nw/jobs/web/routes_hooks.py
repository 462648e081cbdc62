"""``POST /hooks/{job_id}/{attempt}/{signature}``: a provider's webhook for a parked job.

The signature (``nw.jobs.execution.hooks``) is the route's only credential:
the bearer token and the same-origin rule are not asked of it (a provider
has neither), and a wrong one is answered 403 with nothing read or written.
The payload (JSON, checked as every body is) is kept in the store beside the
job (``ParkedStore.keep_webhook``) for a poller of the job's kind to apply
with its ``on_webhook``: a webhook that arrives before the park is recorded
is kept for it, one for a finished, unknown or superseded attempt is
answered 200 with ``"applied": false`` and changes nothing, and a second
delivery of one already applied finds the job finished. So delivery is
idempotent, and no worker need be running when it arrives.
"""

from __future__ import annotations

from typing import cast

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from nw.jobs.execution import hooks
from nw.jobs.stores import shared_store
from nw.jobs.stores.parking import ParkedStore
from nw.jobs.web import state
from nw.jobs.web.inputs import body_text, json_value
from nw.jobs.web.responses import JSONResponse

ROUTE = hooks.ROUTE + "/{job_id}/{attempt:int}/{signature}"


async def receive(request: Request) -> JSONResponse:
    job_id = request.path_params["job_id"]
    attempt = int(request.path_params["attempt"])
    signature = str(request.path_params["signature"])
    served = state.projects(request).all
    mine = [p for p in served if hooks.verify(p, job_id, attempt, signature)]
    if not mine:
        return JSONResponse({"error": "wrong signature for this job and attempt"}, status_code=403)
    payload = json_value(await body_text(request), "the webhook's body")
    config = state.config(request)
    project = mine[0]

    def keep() -> str:
        store = shared_store(project, config, create=False)
        if store is None:
            return "ignored"
        clock = config.clock()
        return cast(ParkedStore, store).keep_webhook(job_id, attempt, payload, now=clock)

    kept = await run_in_threadpool(keep)
    return JSONResponse({"applied": kept != "ignored", "kept": kept})


routes = [Route(ROUTE, receive, methods=["POST"])]
