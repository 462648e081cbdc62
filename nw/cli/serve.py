"""``nw-jobs serve``: the web tray and JSON API under uvicorn."""

from __future__ import annotations

import argparse
import os
from typing import Any

from nw.cli.common import (
    EXIT_OK,
    TOKEN_ENV,
    UserError,
    _console,
    _import_modules,
    _projects,
)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from nw.jobs.web import create_app
    except ImportError as exc:
        raise UserError(
            f"serve needs the web extra ({exc.name} is missing): pip install 'nw-jobs[web]'"
        ) from None
    projects = _projects(args)
    _import_modules(args.imports or ())
    _backend_usable()
    token = args.token or os.environ.get(TOKEN_ENV) or None
    from nw.jobs.web.app import LOOPBACK_HOSTS

    # Bound to loopback, only a loopback name may reach it: a page on another
    # site cannot DNS-rebind its way to the API.
    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    app = create_app(
        projects,
        token=token,
        max_body_bytes=args.max_body_bytes,
        allowed_hosts=LOOPBACK_HOSTS if loopback else None,
    )
    closing = app.state.closing
    _port_free(args.host, args.port)
    where = f"http://{args.host}:{args.port}/"
    console = _console(stderr=True)
    console.print(
        f"nw-jobs tray on {where} for {', '.join(str(p.root) for p in projects)}", soft_wrap=True
    )
    if token:
        # The page trades ?token= for an HttpOnly cookie and drops it from the address bar.
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


def _backend_usable() -> None:
    """A database URL that cannot work (not postgresql://, or the postgres extra not
    installed) is one line now, not a traceback from the app's reaper later."""
    from nw.jobs.model import DEFAULT_CONFIG
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
