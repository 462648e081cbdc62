"""The ASGI guards in front of the routes: host names, the bearer token, body size.

Outermost first: ``HostGuard`` (only this server's own names, a defence
against DNS rebinding on loopback), ``BearerAuth`` (the header, or a cookie
the tray page gets from ``/?token=…`` so the browser's ``EventSource``, which
cannot send headers, is covered too), ``BodyLimit`` (413 past the limit).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from http.cookies import SimpleCookie

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nw.jobs.web.errors import error

TOKEN_COOKIE = "nw_jobs_token"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


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
            await _cookie_redirect(offered or "", scope.get("root_path", ""))(scope, receive, send)
            return
        response = error(
            401,
            "missing or wrong bearer token",
            headers={"www-authenticate": 'Bearer realm="nw-jobs"'},
        )
        await response(scope, receive, send)


def _cookie_redirect(token: str, root: str) -> Response:
    """A 303 to the bare page that leaves the token in a strict, script-proof cookie."""
    cookie: SimpleCookie = SimpleCookie()
    cookie[TOKEN_COOKIE] = token
    morsel = cookie[TOKEN_COOKIE]
    morsel["httponly"] = True
    morsel["samesite"] = "Strict"
    morsel["path"] = (root or "") + "/"
    return Response(
        status_code=303,
        headers={
            "location": (root or "") + "/",
            "set-cookie": morsel.OutputString(),
            "cache-control": "no-store",
        },
    )


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
