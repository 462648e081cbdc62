"""One psycopg connection pool per database URL per process.

Every project's store on the same URL shares one
``psycopg_pool.ConnectionPool`` of autocommit connections whose rows read as
dicts (by column name); a store handle is light. A forked child never
touches its parent's pools: it opens its own.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

POOL_MAX_ENV = "NW_JOBS_PG_POOL_MAX"

_POOLS: dict[str, ConnectionPool[Any]] = {}
_POOLS_PID = os.getpid()
_ORPHANS: list[ConnectionPool[Any]] = []  # a forked child keeps (never uses) the parent's pools
_POOLS_LOCK = threading.Lock()


def pool_for(
    url: str, display: str, first: Callable[[], None] | None = None
) -> ConnectionPool[Any]:
    """This process's pool for ``url`` (opened on first use, after ``first()``,
    which may refuse by raising: a URL that cannot work gets no pool)."""
    global _POOLS_PID
    with _POOLS_LOCK:
        if os.getpid() != _POOLS_PID:
            _ORPHANS.extend(_POOLS.values())
            _POOLS.clear()
            _POOLS_PID = os.getpid()
        pool = _POOLS.get(url)
        if pool is None:
            if first is not None:
                first()
            _quiet_reconnect_attempts()
            pool = _POOLS[url] = ConnectionPool(
                url,
                min_size=1,
                max_size=int(os.environ.get(POOL_MAX_ENV) or 16),
                kwargs={
                    "autocommit": True,
                    "application_name": "nw-jobs",
                    "row_factory": dict_row,
                },
                configure=_configure,
                name=f"nw-jobs {display}",
                open=True,
                timeout=5.0,
                reconnect_timeout=RECONNECT_S,
                reconnect_failed=_grow_while_waited_for,
                max_idle=300.0,
            )
        return pool


#: How long the pool tries to open one connection (attempts a second apart, its
#: backoff's first step) before it gives up and ``_grow_while_waited_for`` decides.
RECONNECT_S = 1.0


def _grow_while_waited_for(pool: ConnectionPool[Any]) -> None:
    """The pool gave up opening a connection (``RECONNECT_S`` of failures):
    while a caller waits for one, try again at once.

    psycopg_pool grows for a waiting caller once, when it starts to wait; if
    that growth gives up (the server restarting) nothing tries again before
    the caller's timeout (5 s), so a caller waited up to 5 s after the server
    was back. ``reconnect_timeout=0`` gave up after two attempts at once;
    a longer one backs off 1, 2, 4, 8 s between attempts, late by as much.
    Given up each second and begun again, a waiting caller gets its connection
    within about a second of the server's return; nobody waiting, the next
    caller's wait starts the growth (``min_size`` is 1: nothing is lost)."""
    if pool.closed or not pool.get_stats().get("requests_waiting"):
        return
    with contextlib.suppress(Exception):
        pool.check()  # grows the pool (one attempt at a time) and drops broken idle ones


def _not_a_reconnect_attempt(record: logging.LogRecord) -> bool:
    """The pool logs every failed (re)connection attempt; ``Database.run`` says
    once that it is retrying and, when it gives up, why: the rest is noise."""
    return not str(record.msg).startswith(("error connecting in", "reconnection attempt in"))


def _quiet_reconnect_attempts() -> None:
    logger = logging.getLogger("psycopg.pool")
    if _not_a_reconnect_attempt not in logger.filters:
        logger.addFilter(_not_a_reconnect_attempt)


def _configure(conn: psycopg.Connection) -> None:
    """Session settings of every pooled connection.

    No bitmap scans: every query of the store is a short ordered walk of one
    index (a page, a claim's due jobs) or a key lookup. A bitmap scan reads the
    whole range and sorts it, which the planner picks when its statistics
    are stale (a backlog that grew since the last ANALYZE looks like 2 rows),
    and then a claim of 8 jobs reads the entire queue. Sorts are discouraged
    for the same reason: a newest-first page must walk its ordered index and
    stop after ``limit`` rows, never sort the whole project because the
    planner guessed the project holds 50 rows (``project_id`` carries no
    statistics, see 0001_init.sql). Both are only cost penalties: a query
    with no other way still runs. No JIT: these are millisecond queries, and
    the penalties would push their cost past ``jit_above_cost`` (a 350 ms
    compile per claim).

    A session idle inside a transaction for ``IDLE_IN_TRANSACTION_S`` is ended
    by the server. The store's explicit transactions (a create that finds
    its job, a claim of a limited key, a prune's batch) send their statements
    back to back, so a session idle inside one belongs to a process that has
    stopped between two of them (SIGSTOP, a paused container or VM, a swapped
    out host) while holding row locks: every worker beating, finishing or
    reaping those rows would wait on it, and a live worker whose beat waits
    past ``worker_stale_s`` (6 s by default) would be taken for dead. Ended
    at 5 s, the locks go with the session; the process, if it ever goes on,
    finds its connection gone and runs its operation again on a fresh one
    (``Database.run``: every operation may run twice).
    """
    conn.execute(SESSION_SETTINGS)


#: Seconds a store session may sit idle inside a transaction (see ``_configure``).
IDLE_IN_TRANSACTION_S = 5

#: One string, so one round trip (a query without parameters goes by the
#: simple protocol, which takes several statements).
SESSION_SETTINGS = (
    "SET enable_bitmapscan = off; SET enable_sort = off; SET jit = off;"
    f" SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'"
)


def close_pools() -> None:
    """Close this process's pools (tests; a process done with its databases)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values()) if os.getpid() == _POOLS_PID else []
        _POOLS.clear()
    for pool in pools:
        with contextlib.suppress(Exception):
            pool.close(timeout=1.0)


atexit.register(close_pools)
