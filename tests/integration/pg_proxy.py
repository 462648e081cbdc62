"""A TCP relay in front of PostgreSQL that a test can cut and restore: a
connection dropped after it worked, without restarting the shared server;
or freeze: what a client sends after its next send never arrives, as if the
client process had stopped right after it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlparse


class Relay:
    def __init__(self, host: str, port: int):
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = threading.Event()
        self.up.set()
        self._freeze_after: int | None = None
        """Client sends still to forward before the freeze (None: not armed)."""
        self._thawed = threading.Event()
        self._thawed.set()
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream) if self.up.is_set() else None
            except OSError:
                server = None
            with self._lock:  # ``cut`` clears ``up`` under this lock: no connection
                if server is None or not self.up.is_set():  # accepted before it survives it
                    for s in (client, server):
                        if s is not None:
                            s.close()  # refused while cut, as a restarting server would
                    continue
                self._open += [client, server]
            for a, b, upward in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(a, b, upward), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upward: bool = False) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if upward:
                    self._thawed.wait()
                dst.sendall(data)
                if upward:
                    with self._lock:
                        if self._freeze_after is not None:
                            self._freeze_after -= 1
                            if self._freeze_after <= 0:
                                self._freeze_after = None
                                self._thawed.clear()
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until ``restore``."""
        with self._lock:
            self.up.clear()
            conns, self._open = self._open, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def restore(self) -> None:
        self.up.set()

    def freeze_after(self, sends: int = 1) -> None:
        """Forward the clients' next ``sends`` sends, then hold back whatever
        they send until ``thaw`` (the server's answers still arrive)."""
        with self._lock:
            self._freeze_after = sends

    def thaw(self) -> None:
        with self._lock:
            self._freeze_after = None
        self._thawed.set()

    def close(self) -> None:
        self.thaw()
        self.cut()
        self.listener.close()


@contextlib.contextmanager
def relayed(url: str) -> Iterator[tuple[Relay, str]]:
    """A ``Relay`` in front of the server of ``url``, and the URL through it
    (one per process to cut each one's database apart)."""
    parts = urlparse(url)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield (
            relay,
            url.replace(f"{parts.hostname}:{parts.port or 5432}", f"127.0.0.1:{relay.port}"),
        )
    finally:
        relay.close()
