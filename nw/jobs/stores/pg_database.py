"""One PostgreSQL database as the store sees it: its URL, its pool, the retry loop.

``Database.run(fn)`` is the one place a psycopg error becomes the project's
``JobStoreError`` (procrastinate's ``wrap_exceptions``), by its type and
SQLSTATE, never by its message:

* a lost connection (the server restarted, the network dropped; SQLSTATE
  class 08, admin shutdown 57P0x, a session ended idle in a transaction
  25P03, or a pool that cannot connect) is retried
  on a fresh connection, with backoff, until ``retry_s`` has passed; then it
  raises ``JobStoreUnreachable``. Every store operation is written so that
  running it again is safe (fenced writes, upserts, and claim/start/create
  recover what an unacknowledged first try committed, see ``postgres.py``),
  so a write is never silently lost and a claim never handed out twice;
* a deadlock or serialization failure (the transaction was rolled back), or
  ``RetryNow`` from the operation itself, is retried at once;
* anything else raises ``JobStoreError`` with the password scrubbed, in one line.

A connection the server refuses for good (an unknown role or database, a
rejected password) is not an outage and is not retried: one plain connection
before a URL's pool is made tells the two apart, and so does the first pool
timeout later (a database dropped under a running process). libpq gives a
failed connection no SQLSTATE, so this one case is read from its message
(``misconfiguration``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from nw.jobs.core.errors import JobStoreError, JobStoreUnreachable
from nw.jobs.stores.pg_pool import pool_for
from nw.jobs.stores.pg_secrets import display, install_log_filter, register_secret, scrub

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import DictRow
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "the PostgreSQL job store needs psycopg 3 and psycopg-pool: pip install 'nw-jobs[postgres]'"
    ) from exc

log = logging.getLogger("nw.jobs")

Conn = psycopg.Connection[DictRow]
"""A pooled connection: its rows read as dicts (``pg_pool``: ``dict_row``)."""
T = TypeVar("T")

RETRY_S_ENV = "NW_JOBS_PG_RETRY_S"
DEFAULT_RETRY_S = 20.0
#: SQLSTATEs that mean "this connection is gone", whatever the exception class
#: (an administrator's or the server's shutdown; a session the server ended for
#: sitting idle inside a transaction, see ``pg_pool._configure``).
_LOST_STATES = ("57P01", "57P02", "57P03", "25P03")
_MAX_CONFLICTS = 10
#: libpq's words for a connection refused for good (the server's English messages).
_MISCONFIGURED = re.compile(
    r"FATAL:\s+(?P<why>(?:role|database) \"[^\"]*\" does not exist"
    r"|\w+ authentication failed for user \"[^\"]*\""
    r"|no pg_hba\.conf entry for [^\n]*"
    r"|permission denied for database [^\n]*"
    r"|role \"[^\"]*\" is not permitted to log in)"
    r"|(?P<client>fe_sendauth: no password supplied)"
)


class RetryNow(Exception):
    """Raised inside an operation to run it again at once (its transaction rolled back)."""


class Database:
    """A parsed URL, its process-wide pool and the retry loop around every operation."""

    def __init__(self, url: str, *, retry_s: float | None = None):
        install_log_filter()  # before anything here can log a connection string
        try:
            params = conninfo_to_dict(url)
        except Exception as exc:
            raise JobStoreError(f"the PostgreSQL URL is malformed: {scrub(str(exc))}") from None
        secret = params.get("password")
        if secret:
            register_secret(str(secret))
        self.url = url
        self.display = display(params)
        if retry_s is None:
            retry_s = float(os.environ.get(RETRY_S_ENV) or DEFAULT_RETRY_S)
        self.retry_s = retry_s

    def __repr__(self) -> str:
        return f"Database({self.display!r})"

    @property
    def pool(self) -> ConnectionPool[Any]:
        return pool_for(self.url, self.display, first=self._first_contact)

    def _first_contact(self) -> None:
        """Before the URL's pool is made: a misconfiguration is reported now, in
        one line, instead of being retried (and logged by the pool) as if the
        server were restarting. A transient failure passes: the pool and the
        retry loop ride it out."""
        try:
            psycopg.connect(self.url, connect_timeout=5, application_name="nw-jobs").close()
        except psycopg.Error as exc:
            why = misconfiguration(str(exc))
            if why is not None:
                raise JobStoreError(f"job store {self.display}: cannot connect: {why}") from None

    def error(self, what: str, exc: BaseException | str) -> JobStoreError:
        """The project's error for a driver error (the password scrubbed), one line:
        libpq's messages carry a tab-indented hint on a second line."""
        kind = JobStoreUnreachable if _is_unreachable(exc) else JobStoreError
        return kind(f"job store {self.display}: {what}: {_one_line(scrub(str(exc)))}")

    def run(self, fn: Callable[[Conn, bool], T], *, what: str) -> T:
        """``fn(conn, retried)`` on a pooled autocommit connection (see the module doc)."""
        deadline = time.monotonic() + self.retry_s
        retried = warned = False
        delay = 0.05
        conflicts = 0
        while True:
            lost: BaseException | None = None
            try:
                wait = min(max(deadline - time.monotonic(), 0.05), 5.0)
                with self.pool.connection(timeout=wait) as conn:
                    try:
                        return fn(conn, retried)
                    except psycopg.OperationalError as exc:
                        if not (conn.broken or conn.closed or _is_lost(exc)):
                            raise
                        lost = exc
            except PoolTimeout as exc:
                lost = exc
                why = self._why_unreachable()  # a database dropped, a role removed
                if why is not None and (bad := misconfiguration(str(why))) is not None:
                    raise self.error(f"{what} failed", bad) from None
            except (
                RetryNow,
                psycopg.errors.DeadlockDetected,
                psycopg.errors.SerializationFailure,
            ) as exc:
                conflicts += 1
                if conflicts > _MAX_CONFLICTS:
                    raise self.error(what, exc) from None
                retried = True
                continue
            except psycopg.Error as exc:
                if not _is_lost(exc):
                    raise self.error(what, exc) from None
                lost = exc
            now = time.monotonic()
            if now >= deadline:
                if isinstance(lost, PoolTimeout):
                    lost = self._why_unreachable() or lost
                raise JobStoreUnreachable(
                    f"job store {self.display}: {what} failed: the database is unreachable"
                    f" (gave up after {self.retry_s:g} s): {_one_line(scrub(str(lost)))}"
                ) from None
            if not warned:
                warned = True
                log.warning("job store %s: connection lost during %s; retrying", self.display, what)
            with contextlib.suppress(Exception):
                self.pool.check()
            time.sleep(min(delay, max(deadline - now, 0.0)))
            delay = min(delay * 2, 1.0)
            retried = True

    def _why_unreachable(self) -> BaseException | None:
        """The reason a fresh connection fails (the pool only says it timed out)."""
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except Exception as exc:
            return exc
        return None


def misconfiguration(message: str) -> str | None:
    """What is wrong, when a failed connection's message says retrying cannot
    help (unknown role or database, authentication refused); None otherwise."""
    found = _MISCONFIGURED.search(message)
    return None if found is None else scrub((found["why"] or found["client"]).strip())


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _is_lost(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("08") or state in _LOST_STATES:
        return True
    return isinstance(exc, psycopg.OperationalError) and not state


def _is_unreachable(exc: BaseException | str) -> bool:
    return isinstance(exc, PoolTimeout) or (isinstance(exc, BaseException) and _is_lost(exc))


def one_row(cur: psycopg.Cursor[DictRow]) -> DictRow:
    """The row of a statement that always answers one (``RETURNING`` of a
    count, an aggregate)."""
    row = cur.fetchone()
    assert row is not None, "the statement answered no row"
    return row


def one(conn: Conn, query: str, params: Any = None) -> psycopg.Cursor[DictRow]:
    """``conn.execute(query, params)``, prepared: one of the store's named
    statements, its own (implicit) transaction on an autocommit connection,
    its error raised here.

    Never in a pipeline: there the server runs a statement as soon as its
    Execute arrives and commits it only at the Sync, which psycopg sends
    later, so a process frozen in between (SIGSTOP, a paused container, a long
    pause) would hold the statement's row locks, and every process writing
    those rows (another worker's reaper, a cancel) would wait on it. A plain
    execute sends the statement and its Sync together. Prepared at its first
    run on a connection, not psycopg's sixth: that Parse is a round trip of
    its own, once per statement and pooled connection, and a worker's first
    runs are at boot (its first claim, its first beat), not in the middle of
    its work."""
    return conn.execute(query, params, prepare=True)
