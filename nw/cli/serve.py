"""``nw-jobs serve``: the web tray and JSON API under uvicorn.

Where it listens decides what guards it: a loopback address (judged by
address: ``127.1``, ``127.0.0.2``, ``::1`` and ``localhost`` alike) answers
only to loopback host names, so a page on another site cannot DNS-rebind its
way in; any other address (``0.0.0.0``, a LAN address) serves the network and
refuses to start without a token unless the operator passes
``--allow-network-without-token``, which is then said in a warning line.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import Any

from nw.cli.common import (
    EXIT_OK,
    TOKEN_ENV,
    UserError,
    import_modules,
    make_console,
    projects_from,
)
from nw.jobs.execution.hooks import PUBLIC_URL_ENV

PORTS = range(1, 65536)
UNGUARDED_FLAG = "--allow-network-without-token"


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from nw.jobs.web import create_app
        from nw.jobs.web.security import LOOPBACK_HOSTS, is_loopback
    except ImportError as exc:
        raise UserError(
            f"serve needs the web extra ({exc.name} is missing): pip install 'nw-jobs[web]'"
        ) from None
    if args.port not in PORTS:
        raise UserError(f"--port must be from 1 to 65535, got {args.port}")
    try:
        loopback = is_loopback(args.host)
    except (OSError, UnicodeError) as exc:
        raise UserError(f"--host {args.host}: {getattr(exc, 'strerror', None) or exc}") from None
    token = args.token or os.environ.get(TOKEN_ENV) or None
    where = f"http://{_url_host(args.host)}:{args.port}/"
    if not loopback and not token and not args.allow_network_without_token:
        raise UserError(
            f"--host {args.host} serves the network: give a token (--token or ${TOKEN_ENV}),"
            f" or say {UNGUARDED_FLAG}"
        )
    projects = projects_from(args)
    import_modules(args.imports or ())
    if args.public_url and (
        not args.public_url.startswith(("http://", "https://"))
        or any(ord(ch) < 33 or ord(ch) == 127 for ch in args.public_url)
    ):
        raise UserError("--public-url must be an http:// or https:// URL without spaces")
    if args.public_url:  # in-process bodies of this server sign their webhook URLs under it
        os.environ[PUBLIC_URL_ENV] = args.public_url
    _backend_usable()
    # Bound to loopback, only a loopback name may reach it: a page on another
    # site cannot DNS-rebind its way to the API.
    app = create_app(
        projects,
        token=token,
        max_body_bytes=args.max_body_bytes,
        allowed_hosts=(*LOOPBACK_HOSTS, args.host) if loopback else None,
    )
    closing = app.state.closing
    _port_free(args.host, args.port)
    console = make_console(stderr=True)
    console.print(
        f"nw-jobs tray on {where} for {', '.join(str(p.root) for p in projects)}", soft_wrap=True
    )
    if not loopback and not token:
        console.print(
            f"warning: {where} serves the network with no token:"
            " anyone who reaches it can start, retry and cancel jobs",
            soft_wrap=True,
        )
    if token:
        # The page trades ?token= for an HttpOnly cookie with a 303 to the bare
        # page, so the token URL leaves the address bar and the history.
        console.print(f"bearer token required; open {where}?token={token}", soft_wrap=True)
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    stop = server.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        closing.set()  # open trays' event streams end now, so Ctrl-C stops at once
        stop(sig, frame)

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    server.run()
    return EXIT_OK


def _url_host(host: str) -> str:
    """``host`` as a URL spells it (an IPv6 address in brackets)."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def _backend_usable() -> None:
    """A database URL that cannot work (not postgresql://, or the postgres extra not
    installed) is one line now, not a traceback from the app's reaper later."""
    from nw.jobs.core.model import DEFAULT_CONFIG
    from nw.jobs.stores import database_url, postgres_opener

    if database_url(DEFAULT_CONFIG):
        postgres_opener()


def _port_free(host: str, port: int) -> None:
    """Refuse a taken port before the URL is announced (uvicorn would only log it)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(f"--host {host}: {exc.strerror or exc}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(
                    f"port {port} on {host} is taken (another server?); choose one with --port"
                ) from None
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
