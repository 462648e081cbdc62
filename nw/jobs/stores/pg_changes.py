"""PostgreSQL's change signal: one ``LISTEN`` connection per database per process.

The statements that end a job or ask for a cancel (``finish_many``,
``finish_many_and_claim``, ``request_cancel``) ``NOTIFY`` the project's
change channel in the same statement, once per batch. A waiter of this
process subscribes to the channel; a thread of its own holds the
connection (LISTEN is per session, never a pooled one) and calls every
subscriber of a channel when it is notified. A lost connection is opened
again, and every subscriber is called then too: a notification may have been
missed meanwhile, so each waiter reads its job again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger("nw.jobs")

#: Seconds between attempts to open the connection again after a failure.
RECONNECT_S = 1.0


class Listener:
    """The ``LISTEN`` connection of one database URL, on a daemon thread."""

    def __init__(self, url: str):
        self.url = url
        self._subs: dict[str, set[Callable[[], None]]] = {}
        self._listening: set[str] = set()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._poke_r, self._poke_w = socket.socketpair()
        self._poke_r.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="nw-changes", daemon=True)
        self._thread.start()

    def subscribe(
        self, channel: str, callback: Callable[[], None], *, within_s: float = 5.0
    ) -> Callable[[], None]:
        """Call ``callback()`` on every NOTIFY of ``channel``; returns the call
        that stops it. Waits (up to ``within_s``) until the channel is listened
        to, so a notification sent after this returns is not missed; past that
        (the database unreachable) the subscriber is kept and called when the
        connection comes back."""
        with self._lock:
            self._subs.setdefault(channel, set()).add(callback)
        self._poke()
        with self._ready:
            self._ready.wait_for(lambda: channel in self._listening, timeout=within_s)

        def unsubscribe() -> None:
            with self._lock:
                self._subs.get(channel, set()).discard(callback)

        return unsubscribe

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            self._poke_w.send(b"\0")

    def _call(self, channels: set[str] | None) -> None:
        with self._lock:
            callbacks = [
                cb for ch, subs in self._subs.items() if channels is None or ch in channels
                for cb in subs
            ]  # fmt: skip
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a change subscriber failed")

    def _run(self) -> None:
        conn: psycopg.Connection | None = None
        while True:
            try:
                if conn is None:
                    conn = psycopg.connect(
                        self.url, autocommit=True, application_name="nw-jobs changes"
                    )
                    with self._lock:
                        self._listening.clear()
                    self._call(None)  # what changed while nobody listened
                self._listen_to_new(conn)
                waited: list[Any] = [conn.fileno(), self._poke_r]  # an fd and a socket
                ready, _, _ = select.select(waited, [], [], 30.0)
                if self._poke_r in ready:
                    with contextlib.suppress(OSError):
                        while self._poke_r.recv(4096):
                            pass
                notified = {n.channel for n in conn.notifies(timeout=0)}
                if notified:
                    self._call(notified)
            except (psycopg.Error, OSError, ValueError) as exc:
                log.debug("the change listener lost its connection: %s", exc)
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                conn = None
                self._wait_to_reconnect()

    def _listen_to_new(self, conn: psycopg.Connection) -> None:
        with self._lock:
            wanted = [ch for ch, subs in self._subs.items() if subs]
            new = [ch for ch in wanted if ch not in self._listening]
        for channel in new:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        if new:
            with self._ready:
                self._listening.update(new)
                self._ready.notify_all()

    def _wait_to_reconnect(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            select.select([self._poke_r], [], [], RECONNECT_S)


_listeners: dict[str, Listener] = {}
_listeners_lock = threading.Lock()


def subscribe(url: str, channel: str, callback: Callable[[], None]) -> Callable[[], None]:
    """``Listener.subscribe`` on this process's listener of ``url``."""
    with _listeners_lock:
        listener = _listeners.get(url)
        if listener is None:
            listener = _listeners[url] = Listener(url)
    return listener.subscribe(channel, callback)


def _forget_after_fork() -> None:
    """A forked child has none of the parent's threads or connections."""
    global _listeners_lock
    _listeners.clear()
    _listeners_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
