"""The tray page and its static files (plain HTML, CSS and JS; no build step)."""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

STATIC = ("nw.jobs.web", "static")


def index(request: Request) -> HTMLResponse:
    """The page, with a ``<base>`` so it works mounted under any prefix."""
    html = (resources.files(STATIC[0]) / STATIC[1] / "index.html").read_text("utf-8")
    base = request.scope.get("root_path", "") + "/"
    html = html.replace("<head>", f'<head>\n  <base href="{base}">', 1)
    return HTMLResponse(html, headers={"cache-control": "no-store"})


routes = [
    Route("/", index, methods=["GET"]),
    Mount("/static", app=StaticFiles(packages=[STATIC]), name="static"),
]
