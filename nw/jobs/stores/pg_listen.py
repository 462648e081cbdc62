"""A worker's ``LISTEN``: woken by an enqueue on any host, or by its own datagram."""

from __future__ import annotations

import contextlib
import select
from typing import Any

import psycopg
from psycopg import sql

from nw.jobs.execution.wake import WakeListener
from nw.jobs.stores.pg_database import Database


class PgWakeListener:
    """A worker's end of ``LISTEN``: ``wait(timeout)`` returns True when woken.

    Two ways in: a ``NOTIFY`` on a listened project's channel (an enqueue on
    any host) and, like the embedded store's listener, a datagram to
    ``address`` (the worker pokes itself there when a slot frees). LISTEN
    needs its own connection (it is per session, so never a pooled one); a
    lost one is re-established, on every channel, on the next ``wait``, which
    then returns True so the caller polls once for what it may have missed
    meanwhile. One listener (one connection) serves every project of a
    worker: ``also(store)`` adds a project's channel.
    """

    def __init__(self, db: Database, channel: str, name: str):
        self._db = db
        self._channels = [channel]
        self._conn: psycopg.Connection | None = None
        self._local = WakeListener(name)
        self.address = self._local.address
        with contextlib.suppress(psycopg.Error):
            self._connect()

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(self._channels)

    def _connect(self) -> None:
        conn = psycopg.connect(self._db.url, autocommit=True, application_name="nw-jobs listen")
        try:
            for channel in self._channels:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def also(self, store: Any) -> None:
        """Wake on ``store``'s project too (a worker serving several projects).

        A store without a channel (the embedded store) needs nothing: its wake
        is a datagram to ``address``, which the worker announces to it. A
        PostgreSQL store must be on this listener's database (one connection).
        Call it before ``wait`` runs in another thread (a connection is not
        shared between threads here).
        """
        channel = getattr(store, "channel", None)
        if channel is None:
            return
        if store.db.url != self._db.url:
            raise ValueError(
                f"a wake listener on {self._db.display} cannot listen on {store.db.display}"
            )
        self.listen(channel)

    def listen(self, channel: str) -> None:
        """Add a ``NOTIFY`` channel (idempotent)."""
        if channel in self._channels:
            return
        self._channels.append(channel)
        if self._conn is None or self._conn.closed or self._conn.broken:
            return  # the next wait connects, on every channel
        try:
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except psycopg.Error:
            self._drop()  # re-established, with this channel, on the next wait

    def _pending(self) -> bool:
        """Consume what the server sent; True if it held a notification."""
        assert self._conn is not None
        return any(True for _ in self._conn.notifies(timeout=0))

    def wait(self, timeout: float) -> bool:
        timeout = max(timeout, 0.0)
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._drop()
            try:
                self._connect()
            except psycopg.Error:
                return self._local.wait(min(timeout, 0.5))
            return True
        try:
            if self._pending():
                return True
            sources = [self._conn.fileno()]
            if self._local._sock is not None:
                sources.append(self._local._sock.fileno())
            ready, _, _ = select.select(sources, [], [], timeout)
            if not ready:
                return False
            if len(sources) > 1 and sources[1] in ready:
                self._local.wait(0)  # drain the datagrams
            if sources[0] in ready:
                self._pending()
            return True
        except (psycopg.Error, OSError, ValueError):
            self._drop()
            return True

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._drop()
        self._local.close()
