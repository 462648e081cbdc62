"""The ASGI guards in front of the routes: headers, host names, origins, the token, body size.

Outermost first: ``SecurityHeaders`` (every answer forbids framing, sniffing,
referrers and foreign scripts), ``HostGuard`` (only this server's own names,
a defence against DNS rebinding on loopback), ``QueryCheck`` (in ``inputs``),
``SameOrigin`` (what another page's request may do: nothing that changes a
job, no reads but a plain link), ``BearerAuth`` (the header, or a cookie the
tray page gets from ``/?token=…`` so the browser's ``EventSource``, which
cannot send headers, is covered too), ``BodyLimit`` (413 past the limit).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import socket
from collections.abc import Sequence
from http.cookies import SimpleCookie

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nw.jobs.web.errors import error

TOKEN_COOKIE = "nw_jobs_token"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
JSON_MEDIA_TYPE = "application/json"
_SHORTHAND = re.compile(r"[0-9a-fA-FxX.]+")
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)
"""The page's scripts, styles and requests are its own files and this server only."""
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-resource-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}
"""Sent with every answer, the page's and the API's (unless the answer set its own)."""


def _route_path(scope: Scope) -> str:
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _bearer(headers: Headers) -> str | None:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _token_ok(candidate: str | None, token: bytes) -> bool:
    return candidate is not None and hmac.compare_digest(candidate.encode(), token)


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1).

    Judged by address, not spelling: ``127.1``, ``127.0.0.2``, ``::1`` and
    ``localhost`` are loopback; ``0.0.0.0`` (every interface) is not. A name
    that does not resolve raises ``OSError``."""
    literal = _ip(host)
    if literal is not None:
        return literal.is_loopback
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return bool(infos) and all(
        (a := _ip(str(info[4][0]))) is not None and a.is_loopback for info in infos
    )


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``text`` spells (``[::1]`` too), or None for a name."""
    try:
        ip = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        if not _SHORTHAND.fullmatch(text):
            return None
        try:  # the shorthands inet_aton accepts (127.1), as the socket layer does
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every HTTP answer (an answer's own value wins)."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self.raw = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in self.raw if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class SameOrigin:
    """What a request from another page may do: nothing that changes a job.

    A request that changes something (any method but GET, HEAD, OPTIONS) needs
    ``Content-Type: application/json`` (else 415: a form or a ``no-cors``
    fetch cannot send it without the browser asking first, which this server
    never grants), and must not come from another origin (else 403): the
    browser's ``Sec-Fetch-Site`` is ``same-origin``, or, without it, ``Origin``
    is this server's own. A page on another port of the same host is another
    origin (though the same *site*, so a SameSite cookie rides along: the
    cookie alone proves nothing). ``Authorization: Bearer <token>`` passes
    whatever the origin (no page can send it without the token). A request
    with neither header comes from no browser page (every current browser
    sends them on a POST), as ``curl`` or a script does: it passes, behind the
    token when there is one.

    A read from another origin is refused too (403), except a top-level
    navigation (a link to the tray): another page may not open event streams,
    load the API as a script or image, or time its answers.
    """

    def __init__(self, app: ASGIApp, token: str | None):
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        method = scope["method"].upper()
        vouched = self.token is not None and _token_ok(_bearer(headers), self.token)
        foreign = None if vouched else _foreign_origin(headers)
        if method not in SAFE_METHODS:
            if foreign:
                message = f"refused a {method} from another origin ({foreign})"
                await error(403, message)(scope, receive, send)
                return
            media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media_type != JSON_MEDIA_TYPE:
                shown = media_type or "none"
                message = f"a {method} needs Content-Type: {JSON_MEDIA_TYPE} (got {shown})"
                await error(415, message)(scope, receive, send)
                return
        elif foreign and headers.get("sec-fetch-mode") != "navigate":
            await error(403, f"refused a read from another origin ({foreign})")(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)


def _foreign_origin(headers: Headers) -> str | None:
    """The other origin a browser says the request comes from, or None.

    ``Sec-Fetch-Site`` decides when present (``same-origin``, or ``none`` for
    what the person typed or bookmarked, are ours); else ``Origin``, whose
    host and port must be the ``Host`` the request came to; neither: not from
    a page."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        site = site.strip().lower()
        return None if site in ("same-origin", "none") else f"Sec-Fetch-Site: {site}"
    origin = headers.get("origin")
    if origin is None:
        return None
    # Host and port as the Host header names them (a TLS proxy may change the scheme)
    host = origin.strip().lower().partition("://")[2]
    return None if host and host == headers.get("host", "").lower() else f"Origin: {origin.strip()}"


HOOKS_PREFIX = "/hooks/"
"""Providers' webhooks (``routes_hooks``): each URL signed for one job and attempt."""


class BearerAuth:
    """Every request needs the token: ``Authorization: Bearer …`` or the tray's cookie.

    ``GET /?token=…`` with the right token sets an HttpOnly, SameSite=Strict
    cookie and answers a 303 to the bare page, so the token URL is replaced
    in the browser's history (never kept there) and leaves the address bar.
    """

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token.encode()

    def _ok(self, candidate: str | None) -> bool:
        return _token_ok(candidate, self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and _route_path(scope).startswith(HOOKS_PREFIX):
            await self.app(scope, receive, send)  # signed per job: a provider has no token
            return
        request = Request(scope)
        if scope["type"] == "websocket":  # no socket routes today; none may slip past later
            if self._ok(_bearer(request.headers)):
                await self.app(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        if self._ok(_bearer(request.headers)) or self._ok(request.cookies.get(TOKEN_COOKIE)):
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
    """Only requests whose ``Host`` names this server (DNS-rebinding defence for loopback).

    A host is one of ``hosts`` (a name, compared without case; an address,
    compared as an address), or any loopback address: a rebinding page
    always reaches the server by a name of its own, never by an address."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str]):
        self.app = app
        self.names = {h.lower() for h in hosts if _ip(h) is None}
        self.addresses = {ip for h in hosts if (ip := _ip(h)) is not None}

    def allows(self, host: str) -> bool:
        host = host.strip().lower()
        if host.startswith("["):  # [::1]:8765
            name = host.partition("]")[0] + "]"
        else:
            name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        if name in self.names:
            return True
        address = _ip(name) if name and (name[0].isdigit() or name[0] == "[") else None
        return address is not None and (address.is_loopback or address in self.addresses)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.allows(
            Headers(scope=scope).get("host", "")
        ):
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
