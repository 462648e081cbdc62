"""Waking idle workers when a job is queued (embedded store: Unix datagrams).

A worker announces a wake address (an abstract Unix socket, Linux) in the
runners table; the embedded store's ``create`` of a claimable job sends each
one a byte. A worker that misses it still finds the job on its slow poll, so a
lost wake costs latency, never a job.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
import weakref
from typing import Any, Protocol


class _AnnouncesRunners(Protocol):
    def runners(self) -> list[dict[str, Any]]: ...


_CACHE_S = 1.0
#: Each store's announced wake addresses, read at most once a second. Keyed by
#: the store itself, weakly: a key by ``id(store)`` outlived its store, and a
#: new store given the same id read another project's (or test's) addresses.
_cache: weakref.WeakKeyDictionary[Any, tuple[float, list[str]]] = weakref.WeakKeyDictionary()


def wake_runners(store: _AnnouncesRunners) -> None:
    if not sys.platform.startswith("linux"):
        return
    now = time.monotonic()
    cached = _cache.get(store)
    if cached is None or now - cached[0] > _CACHE_S:
        addrs = [r["wake"] for r in store.runners() if r.get("wake")]
        _cache[store] = cached = (now, addrs)
    if not cached[1]:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for addr in cached[1]:
            with contextlib.suppress(OSError):
                sock.sendto(b"!", "\0" + addr)


class WakeListener:
    """A worker's end: ``wait(timeout)`` returns early when woken."""

    def __init__(self, name: str):
        self.address: str | None = None
        self._sock: socket.socket | None = None
        if sys.platform.startswith("linux"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind("\0" + name)
            self._sock, self.address = sock, name

    def also(self, store: object) -> None:
        """Listen for another project too: one address serves them all (see
        ``wake_runners``, which reads it from each project's runners table)."""

    def wait(self, timeout: float) -> bool:
        if self._sock is None:
            time.sleep(timeout)
            return False
        self._sock.settimeout(max(timeout, 0.0001))
        try:
            self._sock.recv(64)
        except (TimeoutError, BlockingIOError):
            return False
        self._sock.setblocking(False)
        try:  # drain the rest: one wake is enough
            while self._sock.recv(64):
                pass
        except (BlockingIOError, OSError):
            pass
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
