"""The JSON API and the tray page: thin Starlette routes over the facade.

``create_app(projects)`` returns an ASGI app that a user's own app can mount
(``app.mount("/jobs", create_app([...]))``) or that ``nw-jobs serve`` runs.
Every route validates, calls one facade function and serializes with
``to_dict``; nothing here decides anything about a job.

Guards, outermost first: an optional bearer token (the header, or a cookie
the tray page gets from ``/?token=…`` so the browser's ``EventSource``, which
cannot send headers, is covered too), then a request-body limit (413), then
the routes. Every error is ``{"error": message}`` with a fitting status;
an unexpected one is logged here and answered as a bare 500.

Live updates are server-sent events: ``/api/jobs/{id}/events`` streams one
job until it ends; ``/api/summary/events`` streams the tray's snapshot, so a
page holds one connection however many jobs run (browsers allow six per
host). Both poll the store, because a job's writer may be another process.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from http.cookies import SimpleCookie
from importlib import resources
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nw.jobs import facade, kinds
from nw.jobs.errors import BudgetExceeded, JobStoreError
from nw.jobs.ids import InvalidJobId, check_job_id
from nw.jobs.model import DEFAULT_CONFIG, JobsConfig
from nw.jobs.records import to_dict
from nw.project import Project, ProjectError, as_project

log = logging.getLogger("nw.jobs.web")

TOKEN_COOKIE = "nw_jobs_token"
DEFAULT_MAX_BODY_BYTES = 64 * 1024
VOLATILE = ("elapsed_s", "queue_wait_s", "remaining_s", "eta_s", "eta_ts", "worker_silent_s")
"""Fields that change with the clock alone; a stream resends them once a second, not per poll."""
_STATIC = ("nw.jobs.web", "static")


# ----- errors ------------------------------------------------------------------------
def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _status_for(exc: BaseException) -> int:
    if isinstance(exc, HTTPException):
        return exc.status_code
    if isinstance(exc, JobStoreError):
        return 503
    if isinstance(exc, (InvalidJobId, ValueError, TypeError, KeyError)):
        return 400
    return 500


def _message_of(exc: BaseException) -> str:
    if isinstance(exc, HTTPException):
        return str(exc.detail)
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


async def _on_error(request: Request, exc: Exception) -> Response:
    status = _status_for(exc)
    if status == 500:
        # Starlette re-raises it after this answer, so the server logs the traceback;
        # the client gets no detail of it.
        return error(500, "internal error; see the server log")
    headers = getattr(exc, "headers", None)
    return error(status, _message_of(exc), headers=headers)


_HANDLED = (HTTPException, InvalidJobId, ValueError, TypeError, KeyError, JobStoreError)
"""Answered as a JSON error by the exception middleware (a 4xx, or 503 for the store)."""


# ----- ASGI guards -------------------------------------------------------------------
def _route_path(scope: Scope) -> str:
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class BearerAuth:
    """Every request needs the token: ``Authorization: Bearer …`` or the tray's cookie.

    ``GET /?token=…`` with the right token sets an HttpOnly, SameSite=Strict
    cookie and redirects to the bare page, so the token leaves the address
    bar and a cross-site page can never ride on it.
    """

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token.encode()

    def _ok(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if scope["type"] == "websocket":  # no socket routes today; none may slip past later
            if self._ok(request.headers.get("authorization", "").partition(" ")[2].strip()):
                await self.app(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self._ok(value.strip()):
            await self.app(scope, receive, send)
            return
        if self._ok(request.cookies.get(TOKEN_COOKIE)):
            await self.app(scope, receive, send)
            return
        offered = request.query_params.get("token")
        if _route_path(scope) in ("", "/") and self._ok(offered):
            root = scope.get("root_path", "")
            cookie: SimpleCookie = SimpleCookie()
            cookie[TOKEN_COOKIE] = offered or ""
            morsel = cookie[TOKEN_COOKIE]
            morsel["httponly"] = True
            morsel["samesite"] = "Strict"
            morsel["path"] = (root or "") + "/"
            response = Response(
                status_code=303,
                headers={
                    "location": (root or "") + "/",
                    "set-cookie": morsel.OutputString(),
                    "cache-control": "no-store",
                },
            )
            await response(scope, receive, send)
            return
        response = error(
            401,
            "missing or wrong bearer token",
            headers={"www-authenticate": 'Bearer realm="nw-jobs"'},
        )
        await response(scope, receive, send)


class HostGuard:
    """Only requests whose ``Host`` names this server (DNS-rebinding defence for loopback)."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str]):
        self.app = app
        self.hosts = {h.lower() for h in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = Request(scope).headers.get("host", "").lower()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in self.hosts:
                await error(400, "this server does not answer to that Host")(scope, receive, send)
                return
        await self.app(scope, receive, send)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class BodyLimit:
    """Reads at most ``max_bytes`` of a request body before the route sees it (else 413).

    The body is buffered (the API's bodies are small JSON) and replayed; later
    ``receive`` calls go through, so a stream still learns of a disconnect.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = error(413, f"request body is larger than {self.max_bytes} bytes")
        declared = Request(scope).headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                await error(400, "malformed Content-Length")(scope, receive, send)
                return
            if int(declared) > self.max_bytes:
                await too_big(scope, receive, send)
                return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await too_big(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# ----- the app -----------------------------------------------------------------------
class Projects:
    """The projects this app serves, and how a request names one."""

    def __init__(self, projects: Iterable[Project | str | os.PathLike[str]]):
        self.all: list[Project] = [as_project(p) for p in projects]
        if not self.all:
            raise ProjectError("create_app needs at least one project")

    def pick(self, name: str | None) -> list[Project]:
        """All projects, or the one whose path, folder name or title is ``name``."""
        if not name:
            return self.all
        for project in self.all:
            if name in (str(project.root), project.root.name, project.title):
                return [project]
        raise HTTPException(404, f"no project {name!r} is served here")

    def one(self, name: str | None) -> Project:
        picked = self.pick(name)
        if len(picked) > 1:
            raise HTTPException(400, "several projects are served; say which with 'project'")
        return picked[0]

    def describe(self) -> list[dict[str, str]]:
        return [{"root": str(p.root), "name": p.root.name, "title": p.title} for p in self.all]


def _job_json(job: Any, project: Project) -> dict[str, Any]:
    return {**to_dict(job), "project": str(project.root)}


def _stable(value: Any) -> str:
    """A change key that ignores what only the clock moves."""
    if isinstance(value, dict):
        value = {k: _stable_inner(v) for k, v in value.items() if k not in VOLATILE and k != "now"}
    return json.dumps(value, sort_keys=True, default=str)


def _stable_inner(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable_inner(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable_inner(v) for v in value]
    return value


def _sse(data: Any, *, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, default=str)}\n\n"


def _int_param(request: Request, name: str, default: int, *, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise HTTPException(400, f"{name} must be from {low} to {high}, got {value}")
    return value


def create_app(
    projects: Iterable[Project | str | os.PathLike[str]] | Project | str | os.PathLike[str],
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    config: JobsConfig = DEFAULT_CONFIG,
    poll_interval_s: float = 0.5,
    stream_max_s: float = 300.0,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The jobs API and tray for ``projects`` (one, or several).

    ``token``: require ``Authorization: Bearer <token>`` on every route.
    ``max_body_bytes``: larger request bodies get 413. ``poll_interval_s``:
    how often an event stream reads the store. ``stream_max_s``: an event
    stream ends after this long and the browser's ``EventSource`` reconnects
    (long-lived connections through proxies go stale otherwise).
    ``allowed_hosts``: answer only requests whose ``Host`` is one of these
    (``nw-jobs serve`` passes ``LOOPBACK_HOSTS`` when it binds loopback).
    """
    if isinstance(projects, (Project, str, os.PathLike)):
        projects = [projects]
    served = Projects(projects)
    closing = threading.Event()
    if token is not None and not token:
        raise ValueError("token must be a non-empty string (or None for no auth)")
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")

    def find(job_id: str) -> tuple[Project, Any] | None:
        check_job_id(job_id)
        for project in served.all:
            job = facade.get_job(project, job_id, config=config)
            if job is not None:
                return project, job
        return None

    def found(job_id: str) -> tuple[Project, Any]:
        hit = find(job_id)
        if hit is None:
            raise HTTPException(404, f"no job {job_id}")
        return hit

    # --- routes (sync ones run on Starlette's thread pool) ------------------------
    def list_route(request: Request) -> JSONResponse:
        limit = _int_param(request, "limit", 50, low=1, high=1000)
        status = request.query_params.get("status") or None
        rows: list[dict[str, Any]] = []
        for project in served.pick(request.query_params.get("project")):
            jobs = facade.list_jobs(project, status=status, limit=limit, config=config)
            rows += [_job_json(job, project) for job in jobs]
        rows.sort(key=lambda r: r.get("created_at") or "", reverse=True)
        return JSONResponse({"jobs": rows[:limit]})

    def get_route(request: Request) -> JSONResponse:
        project, job = found(request.path_params["job_id"])
        return JSONResponse(_job_json(job, project))

    def cancel_route(request: Request) -> JSONResponse:
        project, _ = found(request.path_params["job_id"])
        job = facade.cancel_job(project, request.path_params["job_id"], config=config)
        if job is None:
            raise HTTPException(404, f"no job {request.path_params['job_id']}")
        return JSONResponse(_job_json(job, project))

    def estimate_route(request: Request) -> JSONResponse:
        kind = request.query_params.get("kind")
        if not kind:
            raise HTTPException(400, "kind is required")
        params = _json_object(request.query_params.get("params") or "{}", "params")
        project = served.one(request.query_params.get("project"))
        return JSONResponse(facade.estimate(project, kind, params, config=config))

    async def create_route(request: Request) -> JSONResponse:
        body = _json_object((await request.body()).decode("utf-8", "replace"), "the body")
        kind = body.get("kind")
        if not isinstance(kind, str) or not kind:
            raise HTTPException(400, "'kind' is required")
        if kinds.kind_spec(kind) is None:
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
        project = served.one(body.get("project"))
        try:
            job = await run_in_threadpool(
                lambda: facade.enqueue(
                    project,
                    kind,
                    params,
                    idempotency_key=body.get("idempotency_key"),
                    label=body.get("label"),
                    actor=body.get("actor"),
                    approved=body.get("approved", False),
                    config=config,
                )
            )
        except BudgetExceeded as exc:  # the cost gate said no; nothing was written
            return JSONResponse(
                {"error": str(exc), "needs_approval": exc.needs_approval}, status_code=402
            )
        return JSONResponse(_job_json(job, project), status_code=202)

    def summary_now(actor: str | None) -> dict[str, Any]:
        snap = facade.snapshot(served.all, actor=actor, config=config)
        return {**snap, "projects": served.describe()}

    def summary_route(request: Request) -> JSONResponse:
        return JSONResponse(summary_now(request.query_params.get("actor") or None))

    async def job_events(request: Request) -> StreamingResponse:
        job_id = request.path_params["job_id"]
        project, first = await run_in_threadpool(found, job_id)

        def read() -> dict[str, Any] | None:
            job = facade.get_job(project, job_id, config=config)
            return None if job is None else _job_json(job, project)

        async def stream() -> AsyncIterator[str]:
            data: dict[str, Any] | None = _job_json(first, project)
            async for chunk in _changes(
                data, read, poll_interval_s, stream_max_s, _terminal, closing
            ):
                yield chunk

        return _event_stream(stream())

    async def summary_events(request: Request) -> StreamingResponse:
        actor = request.query_params.get("actor") or None
        first = await run_in_threadpool(summary_now, actor)

        async def stream() -> AsyncIterator[str]:
            async for chunk in _changes(
                first, lambda: summary_now(actor), poll_interval_s, stream_max_s, None, closing
            ):
                yield chunk

        return _event_stream(stream())

    def index(request: Request) -> HTMLResponse:
        html = (resources.files(_STATIC[0]) / _STATIC[1] / "index.html").read_text("utf-8")
        base = request.scope.get("root_path", "") + "/"
        html = html.replace("<head>", f'<head>\n  <base href="{base}">', 1)
        return HTMLResponse(html, headers={"cache-control": "no-store"})

    routes = [
        Route("/", index, methods=["GET"]),
        Route("/api/jobs", list_route, methods=["GET"]),
        Route("/api/jobs", create_route, methods=["POST"]),
        Route("/api/jobs/{job_id}", get_route, methods=["GET"]),
        Route("/api/jobs/{job_id}/cancel", cancel_route, methods=["POST"]),
        Route("/api/jobs/{job_id}/events", job_events, methods=["GET"]),
        Route("/api/estimate", estimate_route, methods=["GET"]),
        Route("/api/summary", summary_route, methods=["GET"]),
        Route("/api/summary/events", summary_events, methods=["GET"]),
        Mount("/static", app=StaticFiles(packages=[_STATIC]), name="static"),
    ]
    middleware = [Middleware(BodyLimit, max_bytes=max_body_bytes)]
    if token is not None:
        middleware.insert(0, Middleware(BearerAuth, token=token))
    if allowed_hosts is not None:
        middleware.insert(0, Middleware(HostGuard, hosts=allowed_hosts))
    handlers: dict[Any, Callable] = {cls: _on_error for cls in (*_HANDLED, Exception)}
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)
    app.state.projects = served
    app.state.config = config
    # Set when the server stops: open event streams end at their next poll
    # instead of holding the shutdown until they are cancelled.
    app.state.closing = closing
    return app


def _terminal(data: dict[str, Any] | None) -> bool:
    return data is None or data.get("status") in ("succeeded", "failed", "cancelled")


async def _changes(
    first: dict[str, Any] | None,
    read: Callable[[], dict[str, Any] | None],
    every_s: float,
    max_s: float,
    done: Callable[[dict[str, Any] | None], bool] | None,
    closing: threading.Event,
) -> AsyncIterator[str]:
    """SSE chunks: ``first``, then each change (or a clock tick a second), until ``done``,
    ``max_s`` or ``closing``."""
    yield "retry: 2000\n\n"
    data = first
    sent_key, sent_at = None, 0.0
    ends_at = time.monotonic() + max_s
    while True:
        if data is None:
            yield _sse({"error": "the job is gone"}, event="end")
            return
        key, now = _stable(data), time.monotonic()
        if key != sent_key or now - sent_at >= 1.0:
            sent_key, sent_at = key, now
            yield _sse(data)
        if done is not None and done(data):
            yield _sse({"status": data.get("status")}, event="end")
            return
        if now >= ends_at or closing.is_set():
            return
        await anyio.sleep(every_s)
        data = await run_in_threadpool(read)


def _event_stream(chunks: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        chunks,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HTTPException(400, f"{what} is not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise HTTPException(400, f"{what} must be a JSON object")
    return value
