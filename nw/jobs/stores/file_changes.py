"""The embedded store's change signal: its folder, watched by the OS.

SQLite appends every commit to the ``-wal`` file beside the database, so a
write to the folder is a commit by some process (a worker, another app, this
one). ``watchdog`` asks the OS to report it (inotify on Linux, FSEvents or
kqueue elsewhere): a waiter sleeps until then instead of reading the file on
a timer. One observer thread per process; one watch per folder, shared by
every subscriber of it, kept for the process's life.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("nw.jobs")

#: Event types that say a file in the folder was written (not merely opened).
_WRITES = frozenset({"modified", "created", "moved", "deleted", "closed"})

_lock = threading.Lock()
_observer: Any = None
_watches: dict[str, tuple[Any, set[Callable[[], None]]]] = {}


def _dispatch(folder: str) -> None:
    with _lock:
        callbacks = list(_watches.get(folder, (None, set()))[1])
    for callback in callbacks:
        try:
            callback()
        except Exception:  # one subscriber's failure is not every waiter's
            log.exception("a change subscriber of %s failed", folder)


def _handler(folder: str) -> Any:
    from watchdog.events import FileSystemEventHandler

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            if event.event_type in _WRITES:
                _dispatch(folder)

    return Handler()


def subscribe(folder: Path, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` (on the observer's thread: keep it quick) whenever a
    file in ``folder`` is written; returns the call that stops it. The watch
    is in place when this returns."""
    from watchdog.observers import Observer

    global _observer
    key = str(folder)
    with _lock:
        if _observer is None:
            _observer = Observer()
            _observer.daemon = True
            _observer.start()
        entry = _watches.get(key)
        if entry is None:
            watch = _observer.schedule(_handler(key), key, recursive=False)
            entry = _watches[key] = (watch, set())
        entry[1].add(callback)

    def unsubscribe() -> None:
        # The folder's watch stays for the next subscriber (a watch is cheap to
        # keep, and unscheduling one while the OS reports on it makes watchdog
        # complain on stderr); the OS drops it when the folder is deleted.
        with _lock:
            found = _watches.get(key)
            if found is not None:
                found[1].discard(callback)

    return unsubscribe


def _forget_after_fork() -> None:
    """A forked child has no observer thread: it starts its own when asked."""
    global _observer, _lock
    _observer, _lock = None, threading.Lock()
    _watches.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
