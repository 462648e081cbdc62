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
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from au import ComputationResult, ComputationStatus

from nw.jobs.errors import JobStoreError
from nw.jobs.model import ACTIVE_STATUSES
from nw.jobs.records import JobRow, unreadable_record
from nw.jobs.stores.base import (
    COLUMNS,
    JobStore,
    actor_id_of,
    carry_over,
    split_record,
    utc_iso,
)
from nw.jobs.wake import WakeListener, wake_runners

DB_NAME = "jobs.sqlite3"
SCHEMA_VERSION = 1
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_SELECT = (
    "SELECT j.job_id, j.created_at, j.kind, j.attempt, j.cancel_requested, j.started_at,"
    " j.finished_at, j.heartbeat_at, j.runner_id, j.doc, s.status, s.value, s.error"
    " FROM jobs j LEFT JOIN status s ON s.job_id = j.job_id"
)
# Mirrors nw.jobs.status.job_status; the contract suite checks they agree.
_JOB_STATUS = (
    "CASE WHEN s.status IS NULL OR NOT json_valid(j.doc) THEN 'failed'"
    " WHEN j.cancel_requested THEN"
    " (CASE WHEN j.finished_at IS NULL THEN 'cancelling' ELSE 'cancelled' END)"
    " WHEN s.status = 'pending' THEN 'queued'"
    " WHEN s.status = 'running' THEN 'running'"
    " WHEN s.status = 'completed' THEN 'succeeded'"
    " ELSE s.status END"
)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class SqliteJobStore(JobStore):
    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._pid = os.getpid()
        try:
            self._conn = self._connect()
        except sqlite3.DatabaseError as exc:
            raise JobStoreError(f"job store {str(self.path)!r} cannot be opened: {exc}") from None

    # ----- connection ------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            uri = f"{self.path.as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("PRAGMA query_only = ON")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            schema = resources.files("nw.jobs.stores").joinpath("sqlite_schema.sql").read_text()
            schema = "\n".join(ln for ln in schema.splitlines() if not ln.lstrip().startswith("--"))
            conn.execute("BEGIN IMMEDIATE")
            try:
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
        with self._lock:
            if os.getpid() != self._pid:  # a forked child must not share the handle
                self._pid, self._conn = os.getpid(), self._connect()
            conn = self._conn
            try:
                if write:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        yield conn
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                else:
                    yield conn
            except sqlite3.DatabaseError as exc:
                raise JobStoreError(f"job store {str(self.path)!r}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ----- decoding --------------------------------------------------------------
    def _row(self, r: Sequence[Any]) -> JobRow:
        job_id = r[0]
        try:
            doc = json.loads(r[9])
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except (TypeError, ValueError) as exc:
            doc = unreadable_record(job_id, f"index: {exc}")
        record = dict(doc)
        for name, value in zip(COLUMNS, r[:9], strict=True):
            record[name] = value  # the columns stay readable even when the doc is not
        record["cancel_requested"] = bool(record["cancel_requested"])
        au_status, value, error = r[10], r[11], r[12]
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

    # ----- reads -----------------------------------------------------------------
    def get(self, job_id: str) -> JobRow | None:
        with self._cursor() as c:
            r = c.execute(_SELECT + " WHERE j.job_id = ?", (job_id,)).fetchone()
        return None if r is None else self._row(r)

    def page(
        self, *, status: str | None = None, actor_id: str | None = None, limit: int = 50
    ) -> list[JobRow]:
        where, args = [], []
        if status is not None:
            where.append(f"({_JOB_STATUS}) = ?")
            args.append(str(status))
        if actor_id is not None:
            where.append("j.actor_id = ?")
            args.append(actor_id)
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY j.created_at DESC, j.job_id DESC LIMIT ?"
        with self._cursor() as c:
            rows = c.execute(sql, (*args, int(limit))).fetchall()
        return [self._row(r) for r in rows]

    def live(self) -> list[JobRow]:
        with self._cursor() as c:
            rows = c.execute(
                _SELECT + " WHERE j.finished_at IS NULL ORDER BY j.created_at"
            ).fetchall()
        return [self._row(r) for r in rows]

    def iter_ids(self) -> Iterator[str]:
        with self._cursor() as c:
            ids = [r[0] for r in c.execute("SELECT job_id FROM jobs ORDER BY created_at DESC")]
        return iter(ids)

    # ----- transitions -----------------------------------------------------------
    def _upsert_job(self, c: sqlite3.Connection, record: Mapping[str, Any]) -> dict[str, Any]:
        cols, doc = split_record(record)
        c.execute(
            "INSERT OR REPLACE INTO jobs (job_id, created_at, kind, actor_id, attempt,"
            " cancel_requested, started_at, finished_at, heartbeat_at, runner_id, doc)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                cols["job_id"],
                cols["created_at"],
                cols["kind"],
                actor_id_of(record),
                cols["attempt"],
                int(cols["cancel_requested"]),
                cols["started_at"],
                cols["finished_at"],
                cols["heartbeat_at"],
                cols["runner_id"],
                _dumps(doc),
            ),
        )
        return cols

    def _insert(
        self, c: sqlite3.Connection, record: Mapping[str, Any], queue_at: float | None
    ) -> None:
        cols = self._upsert_job(c, record)
        c.execute(
            "INSERT OR REPLACE INTO status (job_id, status, created_at, attempt, queue_at)"
            " VALUES (?, 'pending', ?, ?, ?)",
            (cols["job_id"], utc_iso(cols["created_at"]), cols["attempt"], queue_at),
        )

    def create(
        self,
        record: dict[str, Any],
        *,
        claimable: bool,
        admit: Callable[[], None] | None = None,
    ) -> tuple[JobRow, bool]:
        job_id = record["job_id"]
        with self._cursor(write=True) as c:  # BEGIN IMMEDIATE: one writer at a time
            r = c.execute(_SELECT + " WHERE j.job_id = ?", (job_id,)).fetchone()
            if r is not None:
                existing = self._row(r)
                if existing.status in ACTIVE_STATUSES:
                    return existing, False
            if admit is not None:
                admit()  # reads through this same connection, inside the transaction
            if r is not None:
                record = {**record, **carry_over(existing.record)}
                c.execute("DELETE FROM progress WHERE job_id = ?", (job_id,))
            self._insert(c, record, record["created_at"] if claimable else None)
        if claimable:
            self.wake_workers()  # after the commit: a woken worker finds the job
        return JobRow(dict(record), "pending"), True

    def _start_rows(
        self, c: sqlite3.Connection, ids: Sequence[str], now: float, runner_id: str
    ) -> list[JobRow]:
        rows = []
        for job_id in ids:
            c.execute(
                "UPDATE status SET status = 'running', attempt = attempt + 1, queue_at = NULL"
                " WHERE job_id = ?",
                (job_id,),
            )
            c.execute(
                "UPDATE jobs SET attempt = attempt + 1, started_at = ?, heartbeat_at = ?,"
                " runner_id = ? WHERE job_id = ?",
                (now, now, runner_id, job_id),
            )
            rows.append(self._row(c.execute(_SELECT + " WHERE j.job_id = ?", (job_id,)).fetchone()))
        return rows

    def start(self, job_id: str, *, now: float, runner_id: str) -> JobRow | None:
        with self._cursor(write=True) as c:
            ok = c.execute(
                "SELECT 1 FROM status s JOIN jobs j ON j.job_id = s.job_id"
                " WHERE s.job_id = ? AND s.status = 'pending' AND NOT j.cancel_requested",
                (job_id,),
            ).fetchone()
            if not ok:
                return None
            return self._start_rows(c, [job_id], now, runner_id)[0]

    def claim(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> list[JobRow]:
        if not kinds or limit < 1:
            return []
        marks = ",".join("?" * len(kinds))
        with self._cursor(write=True) as c:
            ids = [
                r[0]
                for r in c.execute(
                    "SELECT s.job_id FROM status s JOIN jobs j ON j.job_id = s.job_id"
                    " WHERE s.queue_at IS NOT NULL AND s.queue_at <= ? AND s.status = 'pending'"
                    f" AND NOT j.cancel_requested AND j.kind IN ({marks})"
                    " ORDER BY s.queue_at, s.job_id LIMIT ?",
                    (now, *kinds, limit),
                )
            ]
            return self._start_rows(c, ids, now, runner_id) if ids else []

    def _fence_ok(self, c: sqlite3.Connection, job_id: str, attempt: int | None) -> bool:
        r = c.execute("SELECT attempt FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return r is not None and (attempt is None or r[0] == attempt)

    def _patch(self, c: sqlite3.Connection, job_id: str, fields: Mapping[str, Any]) -> None:
        sets, col_args, paths, doc_args = [], [], [], []
        for name, value in fields.items():
            if not _FIELD_NAME.fullmatch(name):
                raise ValueError(f"not a record field name: {name!r}")
            if name == "job_id":
                continue
            if name in COLUMNS:
                sets.append(f"{name} = ?")
                col_args.append(int(bool(value)) if name == "cancel_requested" else value)
            else:
                paths.append(f"'$.{name}', json(?)")
                doc_args.append(_dumps(value))
        if "actor" in fields:
            sets.append("actor_id = ?")
            col_args.append(actor_id_of(fields))
        if paths:
            sets.append(f"doc = json_set(doc, {', '.join(paths)})")
        if sets:
            c.execute(
                f"UPDATE jobs SET {', '.join(sets)} WHERE job_id = ?",
                (*col_args, *doc_args, job_id),
            )

    def patch(self, job_id: str, fields: Mapping[str, Any], *, attempt: int | None) -> bool:
        with self._cursor(write=True) as c:
            if not self._fence_ok(c, job_id, attempt):
                return False
            self._patch(c, job_id, fields)
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
        value = None if result is None else _dumps(result)
        with self._cursor(write=True) as c:
            if not self._fence_ok(c, job_id, attempt):
                return False
            c.execute(
                "UPDATE status SET status = ?, value = ?, error = ?, completed_at = ?,"
                " queue_at = NULL WHERE job_id = ?",
                (
                    au_status.value,
                    value,
                    error,
                    datetime.now().astimezone().isoformat(),
                    job_id,
                ),
            )
            self._patch(c, job_id, fields)
            return True

    def requeue(
        self, job_id: str, *, fields: Mapping[str, Any], not_before: float, attempt: int
    ) -> bool:
        with self._cursor(write=True) as c:
            if not self._fence_ok(c, job_id, attempt):
                return False
            c.execute(
                "UPDATE status SET status = 'pending', value = NULL, error = NULL,"
                " completed_at = NULL, queue_at = ? WHERE job_id = ?",
                (not_before, job_id),
            )
            self._patch(c, job_id, {**fields, "started_at": None, "heartbeat_at": None})
            return True

    def request_cancel(self, job_id: str, *, now: float) -> JobRow | None:
        with self._cursor(write=True) as c:
            r = c.execute(_SELECT + " WHERE j.job_id = ?", (job_id,)).fetchone()
            if r is None:
                return None
            row = self._row(r)
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
            c.execute(
                "UPDATE status SET status = 'cancelled', terminal_reason = 'cancel requested',"
                " queue_at = NULL WHERE job_id = ?",
                (job_id,),
            )
            self._patch(c, job_id, fields)
            return self._row(c.execute(_SELECT + " WHERE j.job_id = ?", (job_id,)).fetchone())

    def beat(self, job_ids: Iterable[str], *, now: float, runner_id: str) -> set[str]:
        ids = list(job_ids)
        with self._cursor(write=True) as c:
            c.execute("UPDATE runners SET beat_at = ? WHERE runner_id = ?", (now, runner_id))
            if not ids:
                return set()
            marks = ",".join("?" * len(ids))
            c.execute(
                f"UPDATE jobs SET heartbeat_at = ? WHERE job_id IN ({marks})"
                " AND finished_at IS NULL AND runner_id = ?",
                (now, *ids, runner_id),
            )
            return {
                r[0]
                for r in c.execute(
                    f"SELECT job_id FROM jobs WHERE job_id IN ({marks}) AND (cancel_requested"
                    " OR finished_at IS NOT NULL OR runner_id IS NOT ?)",
                    (*ids, runner_id),
                )
            }

    # ----- learning, progress, runners -------------------------------------------
    def samples(self, keys: Sequence[str], *, window: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {key: [] for key in keys}
        if not keys:
            return out
        marks = ",".join("?" * len(out))
        with self._cursor() as c:  # one query for every key: enqueue reads ~25 of them
            rows = c.execute(
                "SELECT key, seconds FROM (SELECT key, seconds, at, rowid AS r,"
                " row_number() OVER (PARTITION BY key ORDER BY at DESC, rowid DESC) AS n"
                f" FROM durations WHERE key IN ({marks})) WHERE n <= ? ORDER BY key, at, r",
                (*out, int(window)),
            ).fetchall()
        for key, seconds in rows:
            out[key].append(seconds)
        return out

    def add_samples(self, samples: Mapping[str, float], *, now: float, window: int) -> None:
        with self._cursor(write=True) as c:
            c.executemany(
                "INSERT INTO durations (key, at, seconds) VALUES (?, ?, ?)",
                [(key, now, float(seconds)) for key, seconds in samples.items()],
            )
            for key in samples:
                c.execute(
                    "DELETE FROM durations WHERE key = ? AND rowid NOT IN (SELECT rowid"
                    " FROM durations WHERE key = ? ORDER BY at DESC, rowid DESC LIMIT ?)",
                    (key, key, window),
                )

    def append_progress(self, job_id: str, beat: Mapping[str, Any], *, attempt: int | None) -> bool:
        with self._cursor(write=True) as c:
            if not self._fence_ok(c, job_id, attempt):
                return False
            stage = beat.get("stage")
            c.execute(
                "INSERT INTO progress (job_id, attempt, ts, pct, message, stage)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    attempt,
                    beat["ts"],
                    beat.get("pct"),
                    beat.get("message"),
                    None if stage is None else _dumps(stage),
                ),
            )
            return True

    def progress(self, job_id: str, *, limit: int) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = c.execute(
                "SELECT ts, pct, message, stage, attempt FROM progress WHERE job_id = ?"
                " ORDER BY seq DESC LIMIT ?",
                (job_id, int(limit)),
            ).fetchall()
        return [
            {
                "ts": ts,
                "pct": pct,
                "message": msg,
                "stage": None if stage is None else json.loads(stage),
                "attempt": att,
            }
            for ts, pct, msg, stage, att in reversed(rows)
        ]

    def register_runner(self, runner_id: str, info: Mapping[str, Any], *, now: float) -> None:
        with self._cursor(write=True) as c:
            c.execute(
                "INSERT OR REPLACE INTO runners (runner_id, info, started_at, beat_at)"
                " VALUES (?, ?, ?, ?)",
                (runner_id, _dumps(dict(info)), now, now),
            )

    def unregister_runner(self, runner_id: str) -> None:
        with self._cursor(write=True) as c:
            c.execute("DELETE FROM runners WHERE runner_id = ?", (runner_id,))

    def runners(self) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = c.execute("SELECT runner_id, info, started_at, beat_at FROM runners").fetchall()
        return [
            {**json.loads(info), "runner_id": rid, "started_at": st, "beat_at": beat}
            for rid, info, st, beat in rows
        ]

    def spend(self) -> dict[str, Any]:
        with self._cursor() as c:
            actual, lower, live, unknown = c.execute(
                "SELECT coalesce(sum(coalesce(json_extract(doc, '$.prior_actual_usd'), 0)"
                "   + coalesce(json_extract(doc, '$.earlier_runs_usd'), 0)"
                "   + CASE WHEN finished_at IS NULL THEN 0"
                "     ELSE coalesce(json_extract(doc, '$.actual_usd'), 0) END), 0.0),"
                " coalesce(max(finished_at IS NOT NULL AND started_at IS NOT NULL"
                "   AND json_extract(doc, '$.actual_is_lower_bound') IS NOT 0), 0),"
                " coalesce(sum(CASE WHEN finished_at IS NULL"
                "   THEN json_extract(doc, '$.estimated_usd') END), 0.0),"
                " count(CASE WHEN finished_at IS NULL"
                "   AND json_extract(doc, '$.estimated_usd') IS NULL THEN 1 END)"
                " FROM jobs"
            ).fetchone()
        return {
            "actual_usd": float(actual),
            "live_estimated_usd": float(live),
            "live_unknown": int(unknown),
            "lower_bound": bool(lower),
        }

    # ----- waking idle workers ----------------------------------------------------
    def wake_listener(self, runner_id: str) -> WakeListener:
        """A Unix datagram socket; its address is announced in the runners table."""
        return WakeListener(f"nw-jobs/{runner_id}")

    def wake_workers(self) -> None:
        """A datagram to each announced runner's wake address."""
        wake_runners(self)

    # ----- raw access ------------------------------------------------------------
    def put_record(self, record: Mapping[str, Any]) -> None:
        with self._cursor(write=True) as c:
            exists = c.execute(
                "SELECT 1 FROM status WHERE job_id = ?", (record["job_id"],)
            ).fetchone()
            cols = self._upsert_job(c, record)
            if not exists:
                c.execute(
                    "INSERT INTO status (job_id, status, created_at) VALUES (?, 'pending', ?)",
                    (cols["job_id"], utc_iso(cols["created_at"])),
                )

    def delete(self, job_id: str) -> None:
        with self._cursor(write=True) as c:
            for table in ("jobs", "status", "progress"):
                c.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))

    def get_status(self, job_id: str) -> ComputationResult | None:
        with self._cursor() as c:
            r = c.execute(
                "SELECT status, value, error, terminal_reason, created_at, completed_at, attempt"
                " FROM status WHERE job_id = ?",
                (job_id,),
            ).fetchone()
        if r is None:
            return None
        status, value, error, reason, created, completed, attempt = r
        return ComputationResult(
            value=None if value is None else json.loads(value),
            status=ComputationStatus(status),
            error=Exception(error) if error else None,
            created_at=datetime.fromisoformat(created),
            completed_at=datetime.fromisoformat(completed) if completed else None,
            metadata={"attempt": attempt},
            terminal_reason=reason,
        )

    def put_status(self, job_id: str, result: ComputationResult) -> None:
        value = None if result.value is None else _dumps(result.value)
        with self._cursor(write=True) as c:
            c.execute(
                "INSERT INTO status (job_id, status, value, error, terminal_reason, created_at,"
                " completed_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT (job_id) DO UPDATE SET"
                " status = excluded.status, value = excluded.value, error = excluded.error,"
                " terminal_reason = excluded.terminal_reason,"
                " completed_at = excluded.completed_at, queue_at = NULL",
                (
                    job_id,
                    result.status.value,
                    value,
                    None if result.error is None else str(result.error),
                    result.terminal_reason,
                    result.created_at.isoformat(),
                    result.completed_at.isoformat() if result.completed_at else None,
                ),
            )
