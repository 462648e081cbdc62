"""The embedded store's base: the file, its connection and schema upgrade,
the named queries and the row codec (``SqliteBase``), and the module's
constants. The store is this base, ``sqlite_claims`` (starts, claims,
limits) and the transitions in ``sqlite.py`` (``SqliteJobStore``)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from nw.canonical import stored_json
from nw.jobs.core.errors import JobStoreError
from nw.jobs.core.records import JobRow, unreadable_record
from nw.jobs.execution.wake import WakeListener, wake_runners
from nw.jobs.stores.columns import COLUMNS, PATCHED_BY_FLAG, patch_values, patched_alone
from nw.jobs.stores.shared import SharedStore
from nw.jobs.stores.sql import load_queries

DB_NAME = "jobs.sqlite3"
SCHEMA_VERSION = 8
#: The version that added the prune rollup (an older file read read-only has none).
ROLLUP_VERSION = 3
#: The version that added limits, priorities and turns (the same for a read-only handle).
LIMITS_VERSION = 4
#: The version that added the spend policy (budgets, approval).
POLICY_VERSION = 5
#: The version that added parked provider jobs (the parked table).
PARKED_VERSION = 6
#: The version that added pipelines (pipelines, pipeline_steps, job_edges).
PIPELINES_VERSION = 7
Q = load_queries("sqlite_queries.sql")
#: The columns a patch sets by a statement of their own (``patch_<name>``).
_PATCHED_ALONE = patched_alone("sqlite")
UPGRADES = load_queries("sqlite_upgrades.sql")
_UNHINTED = re.compile(r"\bINDEXED BY \w+")


def _dumps(value: Any) -> str:
    return stored_json(value)


def upgrade(conn: sqlite3.Connection) -> None:
    """Bring a file of an older version to this one's tables, inside the
    caller's transaction (so a failure leaves the file as it was); what is
    already there is left alone, so it may run again. sqlite_schema.sql then
    creates whatever is still missing."""
    have = {r["name"] for r in conn.execute("PRAGMA table_info(jobs)")}
    if not have:  # a new file: the schema creates everything
        return
    for name, statement in UPGRADES.items():  # add_<version>_<column>, in file order
        if name.startswith("add_") and name.split("_", 2)[2] not in have:
            conn.execute(statement)
    if _has_status_table(conn):
        for name in ("copy", "missing", "drop_status", "drop_claim"):
            conn.execute(UPGRADES[f"upgrade_8_{name}"])


def _has_status_table(conn: sqlite3.Connection) -> bool:
    """The file keeps its jobs' status entries apart (a version before 8)."""
    return conn.execute(UPGRADES["has_status_table"]).fetchone() is not None


def _use_wal(conn: sqlite3.Connection, *, within_s: float = 30.0) -> None:
    """Switch a new file to WAL (it stays so). Two processes creating one file at
    once can get SQLITE_BUSY here without the busy handler ever being called
    (SQLite avoids a deadlock between the two lock upgrades), so it is retried
    for as long as the busy timeout would have waited."""
    deadline = time.monotonic() + within_s
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


class SqliteBase(SharedStore):
    """One project's jobs in one SQLite file: the connection and codec every
    part of the embedded store uses (see ``sqlite.py``)."""

    ROLLUP_QUERIES: ClassVar[Mapping[str, str]] = {
        "spend_since": "rollup_since",
        "counts": "rollup_counts",
    }
    #: The schema version that added each feature's tables (``_has``).
    FEATURE_VERSIONS: ClassVar[Mapping[str, int]] = {
        "rollup": ROLLUP_VERSION,
        "limits": LIMITS_VERSION,
        "policy": POLICY_VERSION,
        "parked": PARKED_VERSION,
        "pipelines": PIPELINES_VERSION,
    }

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._pid = os.getpid()
        #: A read-only handle on a file before version 8 (``_query``).
        self._older = False
        with self._driver_errors("cannot be opened"):
            self._conn = self._connect()

    @contextmanager
    def _driver_errors(self, what: str | None = None) -> Iterator[None]:
        """The one place an sqlite3 error becomes the project's ``JobStoreError``."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            where = f"job store {str(self.path)!r}"
            if what:  # opening: the driver's traceback adds nothing to the message
                raise JobStoreError(f"{where} {what}: {exc}") from None
            raise JobStoreError(f"{where}: {exc}") from exc

    def _connect_read_only(self, flags: str) -> sqlite3.Connection:
        uri = f"{self.path.as_uri()}?{flags}"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 10000")
        self._older = _has_status_table(conn)
        if self._older:  # not upgraded: read as version 8 through a temporary view
            conn.execute(UPGRADES["read_older"])
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn

    def _closed_cleanly(self) -> bool:
        """No -wal and no -shm beside the file: every connection closed (checkpointed)."""
        return not any(Path(f"{self.path}{end}").exists() for end in ("-wal", "-shm"))

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            try:
                return self._connect_read_only("mode=ro")
            except sqlite3.OperationalError:
                if not self._closed_cleanly() or os.access(self.path.parent, os.W_OK):
                    raise
            # A folder we may not write, after a clean close: WAL mode wants to create
            # the -shm file even to read. With no -wal and no -shm no connection is
            # open, so the file is read as it stands (immutable: no locks, no -shm).
            return self._connect_read_only("mode=ro&immutable=1")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 30000")
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            schema = resources.files("nw.jobs.stores").joinpath("sqlite_schema.sql").read_text()
            schema = "\n".join(ln for ln in schema.splitlines() if not ln.lstrip().startswith("--"))
            conn.execute("BEGIN IMMEDIATE")
            try:
                upgrade(conn)  # another process may have upgraded it: nothing to do then
                for statement in schema.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # SQLite may have rolled back itself (a full disk)
                    conn.execute("ROLLBACK")
                conn.close()
                raise
        elif version > SCHEMA_VERSION:
            raise JobStoreError(
                f"job store {str(self.path)!r} has schema {version}, newer than this "
                f"nw-jobs understands ({SCHEMA_VERSION}); upgrade nw-jobs"
            )
        return conn

    @contextmanager
    def _cursor(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        if write and self.read_only:
            raise JobStoreError("this job store was opened read-only")
        with self._lock, self._driver_errors():
            if os.getpid() != self._pid:  # a forked child must not share the handle
                self._pid, self._conn = os.getpid(), self._connect()
            elif self._older and not _has_status_table(self._conn):
                # another process upgraded the file under this read-only view of
                # it: read the file as it is now (the view's table is gone)
                self._conn.close()
                self._conn = self._connect()
            conn = self._conn
            if not write:
                yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def cursor(self, write: bool = False) -> AbstractContextManager[sqlite3.Connection]:
        """The connection under the store's lock (``write``: in a write
        transaction): for the statements of the modules beside this one
        (``pipelines_sqlite``)."""
        return self._cursor(write)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _query(self, name: str) -> str:
        """The named statement; on a read-only handle of an older file (read
        through a view, which has no indexes) without its index hint."""
        return _UNHINTED.sub("", Q[name]) if self._older else Q[name]

    def _all(self, name: str, args: Mapping[str, Any] | None = None) -> Sequence[Mapping[str, Any]]:
        with self._cursor() as c:
            return c.execute(self._query(name), args or {}).fetchall()

    def _run(self, name: str, args: Mapping[str, Any]) -> int:
        with self._cursor(write=True) as c:
            return c.execute(Q[name], args).rowcount

    def _from_json(self, value: Any) -> Any:
        return json.loads(value)

    def _to_json(self, value: Any) -> Any:
        return _dumps(value)

    def _to_list(self, values: list[Any]) -> Any:
        return json.dumps(values)

    def _from_time(self, value: Any) -> datetime:
        if isinstance(value, (int, float)):  # a job's created_at (epoch seconds)
            return datetime.fromtimestamp(value, tz=UTC)
        return datetime.fromisoformat(value)

    def _to_time(self, value: datetime) -> Any:
        return value.isoformat()

    def _has(self, feature: str) -> bool:
        """A writable handle upgraded the file; a read-only one may read an older file."""
        if not self.read_only:
            return True
        with self._cursor() as c:
            version = c.execute("PRAGMA user_version").fetchone()[0]
        return version >= self.FEATURE_VERSIONS[feature]

    def _row(self, r: Mapping[str, Any]) -> JobRow:
        job_id = r["job_id"]
        try:
            doc = json.loads(r["doc"])
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except (TypeError, ValueError) as exc:
            doc = unreadable_record(job_id, f"index: {exc}")
        record = dict(doc)
        for name in COLUMNS:
            record[name] = r[name]  # the columns stay readable even when the doc is not
        record["cancel_requested"] = bool(record["cancel_requested"])
        au_status, value, error = r["status"], r["value"], r["error"]
        result = None
        if value is not None:
            try:
                result = json.loads(value)
            except ValueError as exc:
                record.setdefault("error", f"the job's stored result is unreadable ({exc})")
                au_status = "failed"
        return JobRow(record, au_status, result, error)

    def _get(self, c: sqlite3.Connection, job_id: str) -> JobRow | None:
        r = c.execute(Q["get"], {"job_id": job_id}).fetchone()
        return None if r is None else self._row(r)

    def change_mark(self) -> tuple[int, int]:
        # data_version moves on a commit by any other connection, total_changes
        # on this one's own writes; both are free (no table is read).
        with self._cursor() as c:
            return c.execute(Q["change_mark"]).fetchone()[0], c.total_changes

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        # Every commit, by any process, writes the -wal file beside the database.
        from nw.jobs.stores import file_changes

        return file_changes.subscribe(self.path.parent, callback)

    def _fence(
        self, c: sqlite3.Connection, job_id: str, attempt: int | None, *, unfinished: bool = False
    ) -> str | None:
        """The job's doc when a write fenced by ``attempt`` may go ahead, else
        None (also when ``unfinished`` and the job is finished)."""
        r = c.execute(Q["fence"], {"job_id": job_id}).fetchone()
        if r is None or (attempt is not None and r["attempt"] != attempt):
            return None
        if unfinished and r["finished"]:
            return None
        return r["doc"]

    def _patch(
        self,
        c: sqlite3.Connection,
        job_id: str,
        fields: Mapping[str, Any],
        doc: str,
        transition: tuple[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Set record fields: columns by their set flags (indexed ones by their
        own statement), doc fields merged into ``doc`` (the job's current doc
        text) at the top level. ``transition``: (a statement that sets the
        job's au status with the patch's fields and ``finished_at``, its own
        arguments): the transition and the patch are that one statement."""
        args: dict[str, Any] = {"job_id": job_id, "doc": None, "doc_patch": None}
        args.update({f"set_{name}": False for name in (*PATCHED_BY_FLAG, "finished_at")})
        args.update(dict.fromkeys((*PATCHED_BY_FLAG, "finished_at")))
        cols, merged = patch_values(fields)
        alone = [name for name in cols if name in _PATCHED_ALONE]
        if transition is not None and "finished_at" in alone:
            alone.remove("finished_at")  # set by the transition's statement
            args["set_finished_at"] = True
        for name, value in cols.items():
            if name in PATCHED_BY_FLAG:
                args[name] = value
                args[f"set_{name}"] = True
            elif name in _PATCHED_ALONE:
                args[name] = value
        if any(value is None or isinstance(value, dict) for value in merged.values()):
            args["doc"] = self._merged_doc(job_id, doc, merged)
        elif merged:  # merged by SQLite: no parse and re-dump of the doc here
            args["doc_patch"] = _dumps(merged)
        if transition is not None:
            c.execute(Q[transition[0]], {**args, **transition[1]})
        elif merged or any(args[f"set_{name}"] for name in PATCHED_BY_FLAG):
            c.execute(Q["patch"], args)
        for name in alone:
            c.execute(Q[f"patch_{name}"], args)

    def _merged_doc(self, job_id: str, doc: str, fields: Mapping[str, Any]) -> str:
        """``doc`` with these fields set at the top level (ValueError or TypeError,
        before anything is written, when a value is not JSON)."""
        try:
            current = json.loads(doc)
            if not isinstance(current, dict):
                raise ValueError("not an object")
        except (TypeError, ValueError):
            raise JobStoreError(
                f"job store {str(self.path)!r}: job {job_id}: malformed JSON"
            ) from None
        current.update(fields)
        return _dumps(current)

    def wake_listener(self, runner_id: str) -> WakeListener:
        """A Unix datagram socket; its address is announced in the runners table."""
        return WakeListener(f"nw-jobs/{runner_id}")

    def wake_workers(self) -> None:
        """A datagram to each announced runner's wake address."""
        wake_runners(self)
