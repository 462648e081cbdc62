"""A real uvicorn server on a free loopback port, in a thread, for browser tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

from tests.helpers import wait_until


@contextlib.contextmanager
def serving(app, *, timeout: float = 10.0) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (``http://127.0.0.1:PORT``)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])), name="uvicorn", daemon=True
    )
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=timeout, what="uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        closing = getattr(getattr(app, "state", None), "closing", None)
        if closing is not None:
            closing.set()  # event streams end, so the server stops without cancelling them
        server.should_exit = True
        thread.join(timeout)
        sock.close()
