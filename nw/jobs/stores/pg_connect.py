"""PostgreSQL plumbing for the job store: URLs, pools, retries, migrations, LISTEN.

Owned here, so ``postgres.py`` is only the store's SQL:

* **Secrets.** A database URL may carry a password. ``Database`` parses it once,
  shows it everywhere as ``postgresql://user@host:port/db`` (``display``), and
  scrubs the password from every message it raises and from the records of
  the ``psycopg`` loggers. Errors from psycopg are re-raised as
  ``JobStoreError`` with a scrubbed message.
* **One pool per URL per process.** Every project's store on the same URL
  shares one ``psycopg_pool.ConnectionPool`` (autocommit connections); a store
  handle is light. A forked child never touches its parent's pool.
* **Reconnects.** An operation whose connection is lost (the server restarted,
  the network dropped) is retried on a fresh connection, with backoff, until
  ``retry_s`` has passed; then it raises ``JobStoreError``. Every store
  operation is written so that running it again is safe (fenced writes,
  upserts, and claim/start/create recover what an unacknowledged first try
  committed, see ``postgres.py``), so a write is never silently lost and a
  claim is never handed out twice.
* **Migrations.** ``migrate(url)`` applies the numbered files of
  ``pg_migrations/`` in order, each in its own transaction, under a
  transaction-scoped advisory lock: two hosts migrating at once serialise and
  the second finds nothing to do. It is the only code that creates anything.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import select
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import quote

from nw.jobs.errors import JobStoreError
from nw.jobs.wake import WakeListener

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "the PostgreSQL job store needs psycopg 3 and psycopg-pool: pip install 'nw-jobs[postgres]'"
    ) from exc

log = logging.getLogger("nw.jobs")
T = TypeVar("T")

SCHEMA = "nw_jobs"
MIGRATIONS_PACKAGE = "nw.jobs.stores.pg_migrations"
#: Transaction-scoped advisory lock key of ``migrate`` ("nwjobs" in ASCII).
MIGRATE_LOCK = 0x6E776A6F6273
RETRY_S_ENV = "NW_JOBS_PG_RETRY_S"
POOL_MAX_ENV = "NW_JOBS_PG_POOL_MAX"
DEFAULT_RETRY_S = 20.0
#: SQLSTATEs that mean "this connection is gone", whatever the exception class.
_LOST_STATES = ("57P01", "57P02", "57P03")
_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)[^@\s]*@")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


# ----- secrets -------------------------------------------------------------------
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()


def scrub(text: str, secrets: set[str] | frozenset[str] | None = None) -> str:
    """``text`` without any known password (and without URL/keyword passwords)."""
    with _SECRETS_LOCK:
        known = set(_SECRETS)
    for secret in sorted(known | set(secrets or ()), key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URL_PASSWORD.sub(r"\1***@", text)
    return _KV_PASSWORD.sub(r"\1***", text)


class _ScrubFilter(logging.Filter):
    """Drops passwords from psycopg's own log records (e.g. pool reconnect warnings)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = _ScrubFilter()
for _name in ("psycopg", "psycopg.pool", "nw.jobs"):
    logging.getLogger(_name).addFilter(_FILTER)


def _register_secret(secret: str) -> None:
    if len(secret) >= 1:
        with _SECRETS_LOCK:
            _SECRETS.update({secret, quote(secret, safe=""), quote(secret)})


class RetryNow(Exception):
    """Raised inside an operation to run it again at once (its transaction rolled back)."""


# ----- one database ------------------------------------------------------------------
class Database:
    """A parsed URL, its process-wide pool and the retry loop around every operation."""

    def __init__(self, url: str, *, retry_s: float | None = None):
        try:
            params = conninfo_to_dict(url)
        except Exception as exc:
            raise JobStoreError(f"the PostgreSQL URL is malformed: {scrub(str(exc))}") from None
        secret = params.get("password")
        if secret:
            _register_secret(str(secret))
        self.url = url
        self.display = _display(params)
        if retry_s is None:
            retry_s = float(os.environ.get(RETRY_S_ENV) or DEFAULT_RETRY_S)
        self.retry_s = retry_s

    def __repr__(self) -> str:
        return f"Database({self.display!r})"

    # -- the pool (one per URL per process) ---------------------------------------
    @property
    def pool(self) -> ConnectionPool:
        return _pool_for(self.url, self.display)

    def error(self, what: str, exc: BaseException | str) -> JobStoreError:
        return JobStoreError(f"job store {self.display}: {what}: {scrub(str(exc))}")

    def run(self, fn: Callable[[psycopg.Connection, bool], T], *, what: str) -> T:
        """``fn(conn, retried)`` on a pooled autocommit connection.

        A lost connection is retried until ``retry_s``; a deadlock or
        serialization failure (the transaction was rolled back) is retried at
        once; any other database error raises ``JobStoreError``.
        """
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
            except (
                RetryNow,
                psycopg.errors.DeadlockDetected,
                psycopg.errors.SerializationFailure,
            ) as exc:
                conflicts += 1
                if conflicts > 10:
                    raise self.error(what, exc) from None
                retried = True
                continue
            except psycopg.Error as exc:
                if _is_lost(exc):
                    lost = exc
                else:
                    raise self.error(what, exc) from None
            now = time.monotonic()
            if now >= deadline:
                if isinstance(lost, PoolTimeout):
                    lost = self._why_unreachable() or lost
                raise self.error(
                    f"{what} failed: the database is unreachable"
                    f" (gave up after {self.retry_s:g} s)",
                    lost,
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

    def check_schema(self) -> int:
        """The schema version, or ``JobStoreError`` when it is not the one this
        code speaks (never migrated, behind, or newer). Nothing is created here:
        only ``migrate`` (``nw-jobs db migrate``) changes the schema."""
        if self.url in _SCHEMA_OK:
            return LATEST_VERSION
        version = self.run(_schema_version, what="reading the schema version")
        if version == LATEST_VERSION:
            _SCHEMA_OK.add(self.url)
            return version
        if version > LATEST_VERSION:
            raise JobStoreError(
                f"job store {self.display} has schema version {version}, newer than this "
                f"nw-jobs understands ({LATEST_VERSION}); upgrade nw-jobs"
            )
        state = "is not set up" if version == 0 else f"is at schema version {version}"
        raise JobStoreError(
            f"job store {self.display} {state} (this nw-jobs needs {LATEST_VERSION}); "
            "run `nw-jobs db migrate` against it first"
        )


def _display(params: dict[str, Any]) -> str:
    user = params.get("user") or ""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    db = params.get("dbname") or user
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


def _is_lost(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("08") or state in _LOST_STATES:
        return True
    return isinstance(exc, psycopg.OperationalError) and not state


# ----- pools -----------------------------------------------------------------------
_POOLS: dict[str, ConnectionPool] = {}
_SCHEMA_OK: set[str] = set()  # URLs seen at the latest schema version by this process
_POOLS_PID = os.getpid()
_ORPHANS: list[ConnectionPool] = []  # a forked child keeps (never uses) the parent's pools
_POOLS_LOCK = threading.Lock()


def _pool_for(url: str, display: str) -> ConnectionPool:
    global _POOLS_PID
    with _POOLS_LOCK:
        if os.getpid() != _POOLS_PID:
            _ORPHANS.extend(_POOLS.values())
            _POOLS.clear()
            _POOLS_PID = os.getpid()
        pool = _POOLS.get(url)
        if pool is None:
            pool = _POOLS[url] = ConnectionPool(
                url,
                min_size=1,
                max_size=int(os.environ.get(POOL_MAX_ENV) or 16),
                kwargs={"autocommit": True, "application_name": "nw-jobs"},
                configure=_configure,
                name=f"nw-jobs {display}",
                open=True,
                timeout=5.0,
                reconnect_timeout=0,  # never give up: the retry loop decides
                max_idle=300.0,
            )
        return pool


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
    """
    conn.execute("SET enable_bitmapscan = off")
    conn.execute("SET enable_sort = off")
    conn.execute("SET jit = off")  # the penalties above would otherwise cross jit_above_cost


def close_pools() -> None:
    """Close this process's pools (tests; a process done with its databases)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values()) if os.getpid() == _POOLS_PID else []
        _POOLS.clear()
        _SCHEMA_OK.clear()
    for pool in pools:
        with contextlib.suppress(Exception):
            pool.close(timeout=1.0)


atexit.register(close_pools)


# ----- migrations --------------------------------------------------------------------
def _migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every shipped migration, in order."""
    out = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            out.append((int(match[1]), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(out)


LATEST_VERSION = max(v for v, _, _ in _migration_files())


def _schema_version(conn: psycopg.Connection, _retried: bool) -> int:
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.schema_migrations",)
    ).fetchone()
    if not row or not row[0]:
        return 0
    got = conn.execute(f"SELECT max(version) FROM {SCHEMA}.schema_migrations").fetchone()
    return int(got[0] or 0) if got else 0


def migrate(url: str) -> list[str]:
    """Create or upgrade the schema; returns the names of the migrations applied.

    Idempotent and safe from two hosts at once (a transaction-scoped advisory
    lock serialises them; the second finds nothing left to do). Each
    migration and its bookkeeping row commit together.
    """
    db = Database(url)
    applied: list[str] = []
    try:
        with psycopg.connect(url, application_name="nw-jobs migrate") as conn:
            for version, name, text in _migration_files():
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
                    conn.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA))
                    )
                    conn.execute(
                        f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations ("
                        " version integer PRIMARY KEY, name text NOT NULL,"
                        " applied_at timestamptz NOT NULL DEFAULT now())"
                    )
                    done = conn.execute(
                        f"SELECT 1 FROM {SCHEMA}.schema_migrations WHERE version = %s",
                        (version,),
                    ).fetchone()
                    if done:
                        continue
                    conn.execute(text)  # no parameters: the file may hold many statements
                    conn.execute(
                        f"INSERT INTO {SCHEMA}.schema_migrations (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
                    applied.append(name)
    except psycopg.Error as exc:
        raise db.error("migration failed", exc) from None
    for name in applied:
        log.info("job store %s: applied migration %s", db.display, name)
    return applied


# ----- waking workers ----------------------------------------------------------------
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


class GroupCommit:
    """Coalesces concurrent calls of one write into one statement (group commit).

    ``submit(item)`` blocks until the item is written and returns its result.
    The first caller to find no batch in flight becomes the leader: it takes
    every item queued so far (one per ``key``; a second item for the same key
    waits for the next batch), runs ``flush(items) -> results`` once, outside
    the lock, and hands each waiter its result or the batch's exception. A
    lone caller pays nothing extra (its batch is itself); N threads finishing
    at once pay one round trip and one commit instead of N.
    """

    def __init__(self, flush: Callable[[list[Any]], list[Any]], *, key=None, limit: int = 256):
        self._flush, self._key, self._limit = flush, key, limit
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Pending] = []
        self._busy = False

    def submit(self, item: Any) -> Any:
        mine = _Pending(item)
        with self._cond:
            self._queue.append(mine)
        while True:
            with self._cond:
                while self._busy and not mine.done:
                    self._cond.wait()
                if mine.done:
                    return mine.value()
                batch = self._take()  # mine is queued, so the batch is not empty
                self._busy = True
            try:
                results = list(self._flush([p.item for p in batch]))
                failure = None
            except BaseException as exc:
                results, failure = [None] * len(batch), exc
            with self._cond:
                for pending, result in zip(batch, results, strict=True):
                    pending.finish(result, failure)
                self._busy = False
                self._cond.notify_all()

    def _take(self) -> list[_Pending]:
        """The next batch, oldest first, one item per key; the caller holds the lock."""
        batch, seen, rest = [], set(), []
        for pending in self._queue:
            key = self._key(pending.item) if self._key else id(pending)
            if key in seen or len(batch) >= self._limit:
                rest.append(pending)
            else:
                seen.add(key)
                batch.append(pending)
        self._queue = rest
        return batch


class _Pending:
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: Any):
        self.item, self.done, self.result, self.error = item, False, None, None

    def finish(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error, self.done = result, error, True

    def value(self) -> Any:
        """The result; an exception (the batch's, or this item's own) is raised."""
        if self.error is not None:
            raise self.error
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


@contextlib.contextmanager
def transaction(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """One pipelined transaction: the statements inside travel in one round trip
    (their results are read when needed)."""
    with conn.pipeline(), conn.transaction():
        yield conn
