"""``create_app(projects)``: the JSON API and the tray page, assembled.

The app a user's own app can mount (``app.mount("/jobs", create_app([...]))``)
or that ``nw-jobs serve`` runs. It only assembles: the endpoints are
module-level functions of the request (``routes_jobs``, ``routes_summary``,
``routes_tray``) that read what this puts on ``app.state``; the guards are in
``security``, the answer to each exception type in ``errors``, the event
streams in ``streams``. Every endpoint validates, calls one facade function
and serializes with ``to_dict``; nothing here decides anything about a job.

A new group of routes is a ``routes_<name>.py`` with a ``routes`` list, added
to ``ROUTES`` below.

While the app runs (its lifespan), a ``reaper.ReaperThread`` keeps the served
projects reaped, so a dead worker's job moves on even when nothing reads it
(a project whose store this process may only read is not reaped: one warning
line says so).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware

from nw.errors import InvalidSetting
from nw.jobs.api import facade
from nw.jobs.core.model import DEFAULT_CONFIG, JobsConfig
from nw.jobs.execution.reaper import ReaperThread
from nw.jobs.stores.base import JobStore
from nw.jobs.web import (
    routes_budgets,
    routes_console,
    routes_hooks,
    routes_jobs,
    routes_metrics,
    routes_pipelines,
    routes_summary,
    routes_tray,
    streams,
)
from nw.jobs.web.errors import HANDLERS
from nw.jobs.web.inputs import QueryCheck
from nw.jobs.web.page_cache import PageCache
from nw.jobs.web.security import (
    LOOPBACK_HOSTS,
    BearerAuth,
    BodyLimit,
    HostGuard,
    SameOrigin,
    SecurityHeaders,
)
from nw.jobs.web.state import Projects
from nw.project import Project

log = logging.getLogger("nw.jobs.web")

__all__ = ["DEFAULT_MAX_BODY_BYTES", "LOOPBACK_HOSTS", "ROUTES", "create_app"]

DEFAULT_MAX_BODY_BYTES = 64 * 1024
ROUTES = [
    *routes_tray.routes,
    *routes_console.routes,  # first: POST /api/jobs/retry is not a job id
    *routes_jobs.routes,
    *routes_summary.routes,
    *routes_metrics.routes,
    *routes_budgets.routes,
    *routes_hooks.routes,
    *routes_pipelines.routes,
]


def create_app(
    projects: Iterable[Project | str | os.PathLike[str]] | Project | str | os.PathLike[str],
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    config: JobsConfig = DEFAULT_CONFIG,
    poll_interval_s: float = 0.5,
    stream_max_s: float = 300.0,
    allowed_hosts: Sequence[str] | None = None,
    max_streams: int = streams.MAX_STREAMS,
    max_feeds: int = streams.MAX_FEEDS,
) -> Starlette:
    """The jobs API and tray for ``projects`` (one, or several).

    ``token``: require ``Authorization: Bearer <token>`` on every route.
    ``max_body_bytes``: larger request bodies get 413. ``poll_interval_s``:
    how often an event stream reads the store. ``stream_max_s``: an event
    stream ends after this long and the browser's ``EventSource`` reconnects
    (long-lived connections through proxies go stale otherwise).
    ``allowed_hosts``: answer only requests whose ``Host`` is one of these
    (``nw-jobs serve`` passes ``LOOPBACK_HOSTS`` when it binds loopback).
    ``max_streams``, ``max_feeds``: the event streams' caps (see ``streams``).

    Whatever the settings, a request that changes a job must be JSON and come
    from this server's own page or a client without one (``security.SameOrigin``),
    and every answer carries ``security.SECURITY_HEADERS``.
    """
    if isinstance(projects, (Project, str, os.PathLike)):
        projects = [projects]
    served = Projects(projects)
    if token is not None and not token:
        raise InvalidSetting("token must be a non-empty string (or None for no auth)")
    if max_body_bytes < 1:
        raise InvalidSetting("max_body_bytes must be positive")
    if max_streams < 1 or max_feeds < 1:
        raise InvalidSetting("max_streams and max_feeds must be positive")
    # Outermost first: every answer gets the headers; a foreign Host is refused
    # before anything else is looked at; another page's request before the token.
    middleware = [
        Middleware(SecurityHeaders),
        *([Middleware(HostGuard, hosts=allowed_hosts)] if allowed_hosts is not None else []),
        Middleware(QueryCheck),
        Middleware(SameOrigin, token=token),
        *([Middleware(BearerAuth, token=token)] if token is not None else []),
        Middleware(BodyLimit, max_bytes=max_body_bytes),
    ]
    closing = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # A served project is kept reaped even when nothing reads it: a dead
        # worker's job reads "worker lost", then failed or queued, in seconds.
        reaper = ReaperThread(_writable_stores(served, config), config)
        reaper.start()
        try:
            yield
        finally:
            closing.set()
            reaper.close()
            app.state.marks.close()

    app = Starlette(
        routes=ROUTES, middleware=middleware, exception_handlers=HANDLERS, lifespan=lifespan
    )
    app.state.projects = served
    app.state.config = config
    app.state.poll_interval_s = poll_interval_s
    app.state.stream_max_s = stream_max_s
    # Set when the server stops: open event streams end at their next poll
    # instead of holding the shutdown until they are cancelled.
    app.state.closing = closing
    # One poller per watched value, whatever the number of open streams.
    app.state.feeds = streams.Feeds(
        poll_interval_s, app.state.closing, max_streams=max_streams, max_feeds=max_feeds
    )
    app.state.marks = streams.Marks(config)
    app.state.page_cache = PageCache(app.state.marks, live_ttl_s=poll_interval_s)
    return app


def _writable_stores(
    served: Projects, config: JobsConfig
) -> Callable[[], list[tuple[JobStore, Callable[[str], bool]]]]:
    """What the reaper reaps each round: the served stores this process may
    write. A read-only one (a folder or database it may only read) is passed
    over, with one warning line per project, not a traceback a second."""
    warned: set[Project] = set()

    def stores() -> list[tuple[JobStore, Callable[[str], bool]]]:
        out = []
        for project in served.all:
            for store, held in facade.stores_to_reap([project], config):
                if not store.read_only:
                    out.append((store, held))
                elif project not in warned:
                    warned.add(project)
                    log.warning(
                        "not reaping %s: its job store is read-only to this server", project.root
                    )
        return out

    return stores
