"""The embedded default store: one SQLite file per project (WAL mode).

Why SQLite and not a file per job: the store must give put-if-absent dedup,
claims that N worker processes never double-run, fenced writes, and pages
that cost the same at 100 jobs as at 100,000. SQLite gives all of that inside
one file under ``<root>/.nw/jobs/`` with atomic, crash-safe commits (a
``kill -9`` never leaves half a record), and the SQL is close to the
PostgreSQL backend's. ``synchronous=NORMAL``: a commit survives a process
crash; the last moments before a power loss may be lost, never corrupted.

A process keeps one connection per database file and serialises its use
with a lock; SQLite serialises writers across processes (busy timeout).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from au import ComputationResult, ComputationStatus

from nw.canonical import stored_json
from nw.jobs.core import limits
from nw.jobs.core.errors import JobStoreError
from nw.jobs.core.model import ACTIVE_STATUSES
from nw.jobs.core.records import JobRow, unreadable_record
from nw.jobs.core.storable import storable, storable_fields
from nw.jobs.execution.wake import WakeListener, wake_runners
from nw.jobs.stores import pipelines_sqlite
from nw.jobs.stores.base import (
    COLUMNS,
    JobStore,
    actor_id_of,
    as_stored,
    bound_args,
    bucketed,
    carry_over,
    check_distinct,
    due_at,
    is_field_name,
    rollup_rows,
    split_record,
    utc_day,
    utc_iso,
)
from nw.jobs.stores.sql import load_queries

DB_NAME = "jobs.sqlite3"
SCHEMA_VERSION = 6
#: The version that added the prune rollup (an older file read read-only has none).
ROLLUP_VERSION = 3
#: The version that added limits, priorities and turns (the same for a read-only handle).
LIMITS_VERSION = 4
#: The version that added the spend policy (budgets, approval).
POLICY_VERSION = 5
#: The version that added pipelines (pipelines, pipeline_steps, job_edges).
PIPELINES_VERSION = 6
Q = load_queries("sqlite_queries.sql")
UPGRADES = load_queries("sqlite_upgrades.sql")
#: The columns the ``patch`` statement sets by flag; the indexed ones have a
#: statement each (see ``patch`` in sqlite_queries.sql).
_PATCHED_BY_FLAG = (
    "kind",
    "attempt",
    "cancel_requested",
    "started_at",
    "heartbeat_at",
    "runner_id",
)
_PATCHED_ALONE = ("created_at", "actor_id", "finished_at")


def _dumps(value: Any) -> str:
    return stored_json(value)


def _runner(r: sqlite3.Row) -> dict[str, Any]:
    return {
        **json.loads(r["info"]),
        "runner_id": r["runner_id"],
        "started_at": r["started_at"],
        "beat_at": r["beat_at"],
    }


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


class SqliteJobStore(JobStore):
    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._pid = os.getpid()
        with self._driver_errors("cannot be opened"):
            self._conn = self._connect()

    # ----- connection ------------------------------------------------------------
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
                again = conn.execute("PRAGMA user_version").fetchone()[0]  # another process?
                if 1 <= again < LIMITS_VERSION:  # add the columns it lacks; the rest below
                    have = {r["name"] for r in conn.execute("PRAGMA table_info(jobs)")}
                    for name in ("limit_key", "priority", "actor_seq"):
                        if name not in have:
                            conn.execute(UPGRADES[f"upgrade_2_{name}"])
                for statement in schema.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
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

    # ----- decoding --------------------------------------------------------------
    def _row(self, r: sqlite3.Row) -> JobRow:
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
        if au_status is None:
            return JobRow(record, "failed", None, "the job's status entry is missing")
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

    # ----- reads -----------------------------------------------------------------
    def get(self, job_id: str) -> JobRow | None:
        with self._cursor() as c:
            return self._get(c, job_id)

    def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRow]:
        with self._cursor() as c:
            rows = c.execute(Q["get_many"], {"job_ids": json.dumps(list(job_ids))}).fetchall()
        return {r["job_id"]: self._row(r) for r in rows}

    def page(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        kind: str | None = None,
        grade: str | None = None,
        q: str | None = None,
        before: tuple[float, str] | None = None,
        limit: int = 50,
    ) -> list[JobRow]:
        # The index to walk: the actor's, the kind's, else the newest-first one.
        query = "page_by_actor" if actor_id else "page_by_kind" if kind else "page"
        args = {
            "state": None if status is None else str(status),
            "actor_id": actor_id,
            "kind": kind,
            "grade": grade,
            "q": q,
            "before_at": None if before is None else float(before[0]),
            "before_id": None if before is None else before[1],
            "limit": int(limit),
        }
        with self._cursor() as c:
            rows = c.execute(Q[query], args).fetchall()
        return [self._row(r) for r in rows]

    def live(self, *, claimable: bool = True) -> list[JobRow]:
        with self._cursor() as c:
            rows = c.execute(Q["live" if claimable else "live_unclaimable"]).fetchall()
        return [self._row(r) for r in rows]

    def change_mark(self) -> tuple[int, int]:
        # data_version moves on a commit by any other connection, total_changes
        # on this one's own writes; both are free (no table is read).
        with self._cursor() as c:
            return c.execute(Q["change_mark"]).fetchone()[0], c.total_changes

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        # Every commit, by any process, writes the -wal file beside the database.
        from nw.jobs.stores import file_changes

        return file_changes.subscribe(self.path.parent, callback)

    def iter_ids(self) -> Iterator[str]:
        with self._cursor() as c:
            ids = [r["job_id"] for r in c.execute(Q["iter_ids"])]
        return iter(ids)

    # ----- transitions -----------------------------------------------------------
    def _put_job(self, c: sqlite3.Connection, record: Mapping[str, Any]) -> dict[str, Any]:
        cols, doc = split_record(record)
        args = {
            **cols,
            "actor_id": actor_id_of(record),
            "cancel_requested": int(cols["cancel_requested"]),
            "doc": _dumps(doc),
            "limit_key": record.get("limit_key"),
            "priority": int(record.get("priority") or 0),
        }
        c.execute(Q["put_job"], args)
        return cols

    def create(
        self,
        record: dict[str, Any],
        *,
        claimable: bool,
        admit: Callable[[], None] | None = None,
    ) -> tuple[JobRow, bool]:
        job_id = record["job_id"]
        with self._cursor(write=True) as c:  # BEGIN IMMEDIATE: one writer at a time
            existing = self._get(c, job_id)
            if existing is not None and existing.status in ACTIVE_STATUSES:
                return existing, False
            if admit is not None:
                admit()  # reads through this same connection, inside the transaction
            record = self._put_new(c, record, existing, claimable)
        if claimable:
            self.wake_workers()  # after the commit: a woken worker finds the job
        return JobRow(dict(record), "pending"), True

    def _put_new(
        self,
        c: sqlite3.Connection,
        record: dict[str, Any],
        existing: JobRow | None,
        claimable: bool,
    ) -> dict[str, Any]:
        """Write a new queued job, replacing a finished one (see ``create``)."""
        job_id = record["job_id"]
        if existing is not None:
            record = {**record, **carry_over(existing.record)}
            c.execute(Q["delete_progress"], {"job_id": job_id})
        cols = self._put_job(c, record)
        c.execute(
            Q["put_queued_status"],
            {
                "job_id": job_id,
                "created_at": utc_iso(cols["created_at"]),
                "attempt": cols["attempt"],
                "queue_at": due_at(record) if claimable else None,
            },
        )
        return record

    def create_many(
        self,
        records: Sequence[dict[str, Any]],
        *,
        claimable: Sequence[bool],
        admit: Callable[[list[int]], None] | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> list[tuple[JobRow, bool]]:
        check_distinct(records)
        out: list[tuple[JobRow, bool] | None] = [None] * len(records)
        with self._cursor(write=True) as c:  # BEGIN IMMEDIATE: one writer at a time
            todo: list[tuple[int, dict[str, Any], JobRow | None]] = []
            for k, record in enumerate(records):
                existing = self._get(c, record["job_id"])
                if existing is not None and existing.status in ACTIVE_STATUSES:
                    out[k] = (existing, False)
                else:
                    todo.append((k, record, existing))
            if admit is not None:
                admit([k for k, _, _ in todo])  # inside the transaction, like create's
            for k, record, existing in todo:
                record = self._put_new(c, record, existing, claimable[k])
                out[k] = (JobRow(dict(record), "pending"), True)
            if also is not None:
                also(c)  # the batch's links (pipelines), in the same transaction
        if any(claimable[k] for k, _, _ in todo):
            self.wake_workers()  # once for the batch, after the commit
        return [pair for pair in out if pair is not None]

    def _start_rows(
        self, c: sqlite3.Connection, ids: Sequence[str], now: float, runner_id: str
    ) -> list[JobRow]:
        rows = []
        for job_id in ids:
            args = {"job_id": job_id, "now": now, "runner_id": runner_id}
            c.execute(Q["start_status"], args)
            c.execute(Q["start_job"], args)
            row = self._get(c, job_id)
            assert row is not None  # started just now, in this transaction
            rows.append(row)
        return rows

    def start(self, job_id: str, *, now: float, runner_id: str) -> JobRow | limits.NotYet | None:
        with self._cursor(write=True) as c:
            if not c.execute(Q["can_start"], {"job_id": job_id}).fetchone():
                return None
            info = c.execute(Q["job_limit"], {"job_id": job_id}).fetchone()
            not_before, key = info["not_before"], info["limit_key"]
            if isinstance(not_before, (int, float)) and not_before > now:
                return limits.NotYet(float(not_before), limits.delay_text(not_before - now))
            rooms = self._rooms(c, now)
            if key is not None and rooms.get(key, (None, []))[0] == 0:
                return limits.NotYet(now + 0.2, f"waiting: {key}")
            rows = self._start_rows(c, [job_id], now, runner_id)
            self._note_starts(c, rooms, [key], now)
            return rows[0]

    def _rooms(
        self, c: sqlite3.Connection, now: float
    ) -> dict[str, tuple[int | None, list[float]]]:
        """Each limited key's room now and its start log of the last second
        (read under the write lock: exact)."""
        out = {}
        for r in c.execute(Q["limit_rooms"]):
            log = [t for t in json.loads(r["starts"]) if t > now - limits.RATE_WINDOW_S]
            running = None if r["max_running"] is None else r["max_running"] - r["running"]
            rate = None if r["per_second"] is None else r["per_second"] - len(log)
            out[r["limit_key"]] = (limits.room(running, rate), log)
        return out

    def _note_starts(
        self,
        c: sqlite3.Connection,
        rooms: Mapping[str, tuple[int | None, list[float]]],
        keys: Sequence[str | None],
        now: float,
    ) -> None:
        started: dict[str, int] = {}
        for key in keys:
            if key is not None and key in rooms:
                started[key] = started.get(key, 0) + 1
        for key, n in started.items():
            log = rooms[key][1] + [now] * n
            c.execute(Q["note_starts"], {"key": key, "starts": json.dumps(log), "now": now})

    def claim(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> list[JobRow]:
        """See ``JobStore.claim``: under the write lock, the limits' rooms are
        read once; candidates of full keys are passed over (their keys go in
        ``skip_keys`` and the next candidates are read)."""
        if not kinds or limit < 1:
            return []
        with self._cursor(write=True) as c:
            rooms = self._rooms(c, now)
            free = {key: room for key, (room, _) in rooms.items()}
            skip = sorted(key for key, room in free.items() if room == 0)
            ids: list[str] = []
            keys: list[str | None] = []
            for _round in range(4):
                want = int(limit) - len(ids)
                args = {
                    "now": now,
                    "kinds": json.dumps(list(kinds)),
                    "limit": want,
                    "skip_keys": json.dumps(skip),
                }
                cands = [(r["job_id"], r["limit_key"]) for r in c.execute(Q["claimable"], args)]
                admitted, full = limits.admit(cands, free)
                by_id = dict(cands)
                for job_id in admitted:
                    key = by_id[job_id]
                    if (room := free.get(key)) is not None:
                        free[key] = room - 1
                ids += admitted
                keys += [by_id[job_id] for job_id in admitted]
                if len(admitted) == len(cands) or len(ids) >= limit:
                    break
                skip = sorted(set(skip) | set(full))
            rows = self._start_rows(c, ids, now, runner_id) if ids else []
            self._note_starts(c, rooms, keys, now)
            return rows

    # ----- limits ----------------------------------------------------------------
    def set_limit(
        self, key: str, *, max_running: int | None, per_second: int | None, now: float
    ) -> None:
        args = {"key": key, "max_running": max_running, "per_second": per_second, "now": now}
        with self._cursor(write=True) as c:
            if max_running is None and per_second is None:
                c.execute(Q["delete_limit"], args)
            else:
                c.execute(Q["set_limit"], args)

    def limits(self, *, now: float) -> list[limits.Limit]:
        with self._cursor() as c:
            rows = c.execute(Q["limit_rooms"]).fetchall() if self._has_limits(c) else []
        return [
            limits.Limit(
                r["limit_key"],
                r["max_running"],
                r["per_second"],
                int(r["running"]),
                sum(1 for t in json.loads(r["starts"]) if t > now - limits.RATE_WINDOW_S),
            )
            for r in rows
        ]

    def queue_ahead(self, *, limit: int) -> list[dict[str, Any]]:
        with self._cursor() as c:
            if not self._has_limits(c):  # an older file, read-only: no claim order to replay
                return []
            return [dict(r) for r in c.execute(Q["queue_ahead"], {"limit": int(limit)})]

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
        self, c: sqlite3.Connection, job_id: str, fields: Mapping[str, Any], doc: str
    ) -> None:
        """Set record fields: columns by their set flags (indexed ones by their
        own statement), doc fields merged into ``doc`` (the job's current doc
        text) at the top level."""
        args: dict[str, Any] = {"job_id": job_id, "doc": None, "doc_patch": None}
        args.update({f"set_{name}": False for name in _PATCHED_BY_FLAG})
        args.update(dict.fromkeys(_PATCHED_BY_FLAG))
        alone: list[str] = []
        merged: dict[str, Any] = {}
        for name, value in fields.items():
            if not is_field_name(name):
                raise ValueError(f"not a record field name: {name!r}")
            if name == "job_id":
                continue
            if name in COLUMNS:
                args[name] = int(bool(value)) if name == "cancel_requested" else value
                if name in _PATCHED_ALONE:
                    alone.append(name)
                else:
                    args[f"set_{name}"] = True
            else:
                merged[name] = value
        if "actor" in fields:
            args["actor_id"] = actor_id_of(fields)
            alone.append("actor_id")
        if any(value is None or isinstance(value, dict) for value in merged.values()):
            args["doc"] = self._merged_doc(job_id, doc, merged)
        elif merged:  # merged by SQLite: no parse and re-dump of the doc here
            args["doc_patch"] = _dumps(merged)
        if merged or any(args[f"set_{name}"] for name in _PATCHED_BY_FLAG):
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

    def patch(self, job_id: str, fields: Mapping[str, Any], *, attempt: int | None) -> bool:
        fields, _ = storable_fields(fields)
        with self._cursor(write=True) as c:
            doc = self._fence(c, job_id, attempt)
            if doc is None:
                return False
            self._patch(c, job_id, fields, doc)
            return True

    def finish(
        self,
        job_id: str,
        *,
        au_status: ComputationStatus,
        result: Any,
        error: str | None,
        fields: Mapping[str, Any],
        attempt: int | None,
    ) -> bool:
        result, error, fields = as_stored(job_id, result, error, fields)
        args = {
            "job_id": job_id,
            "au_status": au_status.value,
            "value": None if result is None else _dumps(result),
            "error": error,
            "completed_at": datetime.now().astimezone().isoformat(),
        }
        with self._cursor(write=True) as c:
            doc = self._fence(c, job_id, attempt)
            if doc is None:
                return False
            c.execute(Q["finish_status"], args)
            self._patch(c, job_id, fields, doc)
            released = pipelines_sqlite.settle(c, job_id, time.time())  # its dependents
        if released:
            self.wake_workers()
        return True

    def requeue(
        self, job_id: str, *, fields: Mapping[str, Any], not_before: float, attempt: int | None
    ) -> bool:
        _, _, fields = as_stored(job_id, None, None, fields)
        with self._cursor(write=True) as c:
            doc = self._fence(c, job_id, attempt, unfinished=True)  # a result stays
            if doc is None:
                return False
            c.execute(Q["requeue_status"], {"job_id": job_id, "not_before": not_before})
            fields = {**fields, "started_at": None, "heartbeat_at": None}
            self._patch(c, job_id, fields, doc)
            return True

    def request_cancel(self, job_id: str, *, now: float) -> JobRow | None:
        with self._cursor(write=True) as c:
            row = self._get(c, job_id)
            if row is None:
                return None
            state = row.status.value
            if state not in ("queued", "running"):
                return row
            fields: dict[str, Any] = {"cancel_requested": True}
            if state == "queued":
                fields |= {
                    "finished_at": now,
                    "error": "cancelled before start",
                    "error_kind": "cancelled",
                }
            c.execute(Q["cancel_status"], {"job_id": job_id})
            doc = self._fence(c, job_id, None)
            assert doc is not None  # the row read above, in this transaction
            self._patch(c, job_id, fields, doc)
            released = pipelines_sqlite.settle(c, job_id, now) if state == "queued" else 0
            row = self._get(c, job_id)
        if released:
            self.wake_workers()
        return row

    def beat(self, job_ids: Iterable[str], *, now: float, runner_id: str) -> set[str]:
        ids = list(job_ids)
        args = {"now": now, "runner_id": runner_id, "job_ids": json.dumps(ids)}
        with self._cursor(write=True) as c:
            c.execute(Q["beat_runner"], args)
            if not ids:
                return set()
            c.execute(Q["beat_jobs"], args)
            return {r["job_id"] for r in c.execute(Q["jobs_to_stop"], args)}

    # ----- learning, progress, runners -------------------------------------------
    def samples(self, keys: Sequence[str], *, window: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {key: [] for key in keys}
        if not keys:
            return out
        args = {"keys": json.dumps(list(out)), "window": int(window)}
        with self._cursor() as c:  # one query for every key: enqueue reads ~25 of them
            rows = c.execute(Q["samples"], args).fetchall()
        for r in rows:
            out[r["key"]].append(r["seconds"])
        return out

    def add_samples(self, samples: Mapping[str, float], *, now: float, window: int) -> None:
        with self._cursor(write=True) as c:
            c.executemany(
                Q["add_sample"],
                [{"key": key, "now": now, "seconds": float(s)} for key, s in samples.items()],
            )
            for key in samples:
                c.execute(Q["prune_samples"], {"key": key, "window": window})

    def append_progress(self, job_id: str, beat: Mapping[str, Any], *, attempt: int | None) -> bool:
        beat, _ = storable(dict(beat))
        stage = beat.get("stage")
        args = {
            "job_id": job_id,
            "attempt": attempt,
            "ts": beat["ts"],
            "pct": beat.get("pct"),
            "message": beat.get("message"),
            "stage": None if stage is None else _dumps(stage),
        }
        with self._cursor(write=True) as c:
            if self._fence(c, job_id, attempt) is None:
                return False
            c.execute(Q["append_progress"], args)
            return True

    def progress(self, job_id: str, *, limit: int) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = c.execute(Q["progress"], {"job_id": job_id, "limit": int(limit)}).fetchall()
        return [
            {
                "ts": r["ts"],
                "pct": r["pct"],
                "message": r["message"],
                "stage": None if r["stage"] is None else json.loads(r["stage"]),
                "attempt": r["attempt"],
            }
            for r in reversed(rows)
        ]

    def register_runner(self, runner_id: str, info: Mapping[str, Any], *, now: float) -> None:
        args = {"runner_id": runner_id, "info": _dumps(dict(info)), "now": now}
        with self._cursor(write=True) as c:
            c.execute(Q["register_runner"], args)

    def unregister_runner(self, runner_id: str) -> None:
        with self._cursor(write=True) as c:
            c.execute(Q["unregister_runner"], {"runner_id": runner_id})

    def runners(self) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = c.execute(Q["runners"]).fetchall()
        return [_runner(r) for r in rows]

    def beat_runner(self, runner_id: str, *, now: float) -> list[dict[str, Any]]:
        with self._cursor(write=True) as c:
            c.execute(Q["beat_runner"], {"now": now, "runner_id": runner_id})
            rows = c.execute(Q["runners"]).fetchall()
        return [_runner(r) for r in rows]

    def spend(self, *, actor_id: str | None = None, since: float | None = None) -> dict[str, Any]:
        with self._cursor() as c:
            if actor_id is None:
                r = c.execute(Q["spend"]).fetchone()
                pruned = c.execute(Q["rollup_spend"]).fetchone() if self._has_rollup(c) else None
            else:
                since = since if since is not None else 0.0
                args = {"actor_id": actor_id, "since": since, "since_day": utc_day(since)}
                r = c.execute(Q["spend_by_actor"], args).fetchone()
                pruned = None
                if self._has_rollup(c):
                    pruned = c.execute(Q["rollup_spend_by_actor"], args).fetchone()
        return {
            "actual_usd": float(r["actual_usd"]) + (float(pruned["usd"]) if pruned else 0.0),
            "live_estimated_usd": float(r["live_estimated_usd"]),
            "live_unknown": int(r["live_unknown"]),
            "lower_bound": bool(r["lower_bound"]) or bool(pruned and pruned["lower_bound"]),
        }

    def _has_limits(self, c: sqlite3.Connection) -> bool:
        """Limits and turns exist (a read-only handle may read an older file)."""
        if not self.read_only:
            return True
        return c.execute("PRAGMA user_version").fetchone()[0] >= LIMITS_VERSION

    def _has_rollup(self, c: sqlite3.Connection) -> bool:
        """A writable handle upgraded the file; a read-only one may read an older file."""
        if not self.read_only:
            return True
        return c.execute("PRAGMA user_version").fetchone()[0] >= ROLLUP_VERSION

    # ----- history: prune, totals, metrics ------------------------------------------
    def prune(self, *, cutoff: float, batch: int = 500) -> int:
        deleted = 0
        while True:
            with self._cursor(write=True) as c:  # one batch, rollup and deletes together
                found = c.execute(
                    Q["finished_before"], {"cutoff": float(cutoff), "limit": int(batch)}
                ).fetchall()
                rows = [self._row(r) for r in found]
                c.executemany(
                    Q["add_rollup"],
                    [{**g, "lower_bound": int(g["lower_bound"])} for g in rollup_rows(rows)],
                )
                for row in rows:
                    for query in ("delete_job", "delete_status", "delete_progress"):
                        c.execute(Q[query], {"job_id": row.record["job_id"]})
            deleted += len(rows)
            if len(rows) < batch:
                return deleted

    def count_finished_before(self, *, cutoff: float) -> int:
        with self._cursor() as c:
            return int(c.execute(Q["count_finished_before"], {"cutoff": cutoff}).fetchone()[0])

    def spend_since(self, *, since: float, today: float) -> list[dict[str, Any]]:
        args = {
            "since": since,
            "today": today,
            "since_day": utc_day(since),
            "today_day": utc_day(today),
        }
        with self._cursor() as c:
            rows = [dict(r) for r in c.execute(Q["spend_since"], args)]
            if self._has_rollup(c):
                rows += [dict(r) for r in c.execute(Q["rollup_since"], args)]
        return [
            {**r, "today": bool(r["today"]), "lower_bound": bool(r["lower_bound"])} for r in rows
        ]

    def counts(self) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = [dict(r) for r in c.execute(Q["counts"])]
            if self._has_rollup(c):
                rows += [dict(r) for r in c.execute(Q["rollup_counts"])]
        return [{**r, "grade": r["grade"] or None, "n": int(r["n"])} for r in rows]

    def durations(self, bounds: Sequence[float]) -> dict[str, dict[str, Any]]:
        args = bound_args(bounds)
        with self._cursor() as c:
            rows = c.execute(Q["durations"], args).fetchall()
        return {r["kind"]: bucketed(r, bounds) for r in rows}

    # ----- waking idle workers ----------------------------------------------------
    def wake_listener(self, runner_id: str) -> WakeListener:
        """A Unix datagram socket; its address is announced in the runners table."""
        return WakeListener(f"nw-jobs/{runner_id}")

    def wake_workers(self) -> None:
        """A datagram to each announced runner's wake address."""
        wake_runners(self)

    # ----- raw access behind the views ------------------------------------------
    def put_record(self, record: Mapping[str, Any]) -> None:
        with self._cursor(write=True) as c:
            cols = self._put_job(c, record)
            c.execute(
                Q["add_pending_status"],
                {"job_id": cols["job_id"], "created_at": utc_iso(cols["created_at"])},
            )

    def delete(self, job_id: str) -> None:
        with self._cursor(write=True) as c:
            for query in ("delete_job", "delete_status", "delete_progress"):
                c.execute(Q[query], {"job_id": job_id})

    def get_status(self, job_id: str) -> ComputationResult | None:
        with self._cursor() as c:
            r = c.execute(Q["get_status"], {"job_id": job_id}).fetchone()
        if r is None:
            return None
        completed = r["completed_at"]
        return ComputationResult(
            value=None if r["value"] is None else json.loads(r["value"]),
            status=ComputationStatus(r["status"]),
            error=Exception(r["error"]) if r["error"] else None,
            created_at=datetime.fromisoformat(r["created_at"]),
            completed_at=datetime.fromisoformat(completed) if completed else None,
            metadata={"attempt": r["attempt"]},
            terminal_reason=r["terminal_reason"],
        )

    def put_status(self, job_id: str, result: ComputationResult) -> None:
        """Write a job's au status entry; ``KeyError`` for a job not in the store."""
        args = {
            "job_id": job_id,
            "status": result.status.value,
            "value": None if result.value is None else _dumps(result.value),
            "error": None if result.error is None else str(result.error),
            "terminal_reason": result.terminal_reason,
            "created_at": result.created_at.isoformat(),
            "completed_at": result.completed_at.isoformat() if result.completed_at else None,
        }
        with self._cursor(write=True) as c:
            written = c.execute(Q["put_status"], args).rowcount
        if not written:
            raise KeyError(f"no job {job_id!r} in this store")

    # ----- spend policy (nw/jobs/api/budgets.py) ---------------------------------------
    def _has_policy(self, c: sqlite3.Connection) -> bool:
        """A read-only handle may read a file older than the spend policy."""
        if not self.read_only:
            return True
        return c.execute("PRAGMA user_version").fetchone()[0] >= POLICY_VERSION

    def budgets(self) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = c.execute(Q["budgets"]).fetchall() if self._has_policy(c) else []
        return [dict(r) for r in rows]

    def set_budget(
        self,
        key: str,
        *,
        usd: float | None,
        per: str | None,
        actor_id: str | None,
        kind: str | None,
        now: float,
    ) -> None:
        args = {"key": key, "usd": usd, "per": per, "actor_id": actor_id, "kind": kind}
        with self._cursor(write=True) as c:
            c.execute(Q["delete_budget" if usd is None else "set_budget"], {**args, "now": now})

    def policy_rows(self) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = c.execute(Q["policy"]).fetchall() if self._has_policy(c) else []
        return [dict(r) for r in rows]

    def approval(self) -> dict[str, Any] | None:
        with self._cursor() as c:
            r = c.execute(Q["approval"]).fetchone() if self._has_policy(c) else None
        return dict(r) if r is not None else None

    def set_approval(self, *, threshold_usd: float | None, mode: str, now: float) -> None:
        args = {"threshold_usd": threshold_usd, "mode": mode, "now": now}
        with self._cursor(write=True) as c:
            c.execute(Q["set_approval"], args)

    def hold_budgets(self, keys: Sequence[str]) -> None:
        """Nothing to lock: an admitted create already holds the file's write lock."""

    def budget_spend(
        self, *, since: float | None, actor_id: str | None, kind: str | None
    ) -> dict[str, Any]:
        day = utc_day(since) if since is not None else None
        args = {"since": since, "since_day": day, "actor_id": actor_id, "kind": kind}
        with self._cursor() as c:
            r = c.execute(Q["budget_spend"], args).fetchone()
            pruned = c.execute(Q["budget_rollup_spend"], args).fetchone()
        return {
            "actual_usd": float(r["actual_usd"]) + float(pruned["usd"]),
            "live_estimated_usd": float(r["live_estimated_usd"]),
            "live_unknown": int(r["live_unknown"]),
            "lower_bound": bool(r["lower_bound"]) or bool(pruned["lower_bound"]),
        }

    def quoted_and_billed(
        self, *, since: float, kind: str | None, limit: int
    ) -> list[dict[str, Any]]:
        args = {"since": since, "kind": kind, "limit": int(limit)}
        with self._cursor() as c:
            rows = c.execute(Q["quoted_and_billed"], args).fetchall()
        out = []
        for r in rows:
            row = dict(r)
            try:
                row["calls"] = json.loads(row["calls"]) if row["calls"] else None
            except ValueError:
                row["calls"] = None
            out.append(row)
        return out
