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
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from au import ComputationStatus

from nw.jobs.core.model import ACTIVE_STATUSES
from nw.jobs.core.records import JobRow
from nw.jobs.core.status import CANCELLED_BEFORE_START
from nw.jobs.core.storable import storable, storable_fields
from nw.jobs.stores import pipelines_sqlite
from nw.jobs.stores.base import (
    as_stored,
    carry_over,
    check_distinct,
    due_at,
    rollup_rows,
)
from nw.jobs.stores.columns import row_values
from nw.jobs.stores.sqlite_base import (
    DB_NAME,
    LIMITS_VERSION,
    PIPELINES_VERSION,
    POLICY_VERSION,
    ROLLUP_VERSION,
    SCHEMA_VERSION,
    Q,
    _dumps,
)
from nw.jobs.stores.sqlite_claims import SqliteClaims
from nw.jobs.stores.sqlite_parked import SqliteParking

__all__ = [
    "DB_NAME",
    "LIMITS_VERSION",
    "PIPELINES_VERSION",
    "POLICY_VERSION",
    "ROLLUP_VERSION",
    "SCHEMA_VERSION",
    "SqliteJobStore",
]


class SqliteJobStore(SqliteParking, SqliteClaims):
    """One project's jobs in ``<root>/.nw/jobs/jobs.sqlite3`` (see the module docstring)."""

    def _put_job(
        self,
        c: sqlite3.Connection,
        record: Mapping[str, Any],
        query: str = "put_job",
        queue_at: float | None = None,
    ) -> None:
        """Write a whole record: a new run (``put_job``, claimable from
        ``queue_at`` when set) or as it is (``put_record``)."""
        cols, doc = row_values(record)
        c.execute(Q[query], {**cols, "doc": _dumps(doc), "queue_at": queue_at})

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
        self._put_job(c, record, queue_at=due_at(record) if claimable else None)
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
            "au_status": au_status.value,
            "value": None if result is None else _dumps(result),
            "error": error,
            "completed_at": datetime.now().astimezone().isoformat(),
        }
        with self._cursor(write=True) as c:
            doc = self._fence(c, job_id, attempt)
            if doc is None:
                return False
            self._patch(c, job_id, fields, doc, transition=("finish", args))
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
            fields = {**fields, "started_at": None, "heartbeat_at": None}
            self._patch(c, job_id, fields, doc, transition=("requeue", {"not_before": not_before}))
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
                fields |= {"finished_at": now, **CANCELLED_BEFORE_START}
            doc = self._fence(c, job_id, None)
            assert doc is not None  # the row read above, in this transaction
            self._patch(c, job_id, fields, doc, transition=("cancel", {}))
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

    def beat_runner(self, runner_id: str, *, now: float) -> list[dict[str, Any]]:
        with self._cursor(write=True) as c:
            c.execute(Q["beat_runner"], {"now": now, "runner_id": runner_id})
            rows = c.execute(Q["runners"]).fetchall()
        return [self._runner(r) for r in rows]

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
                    for query in ("delete_job", "delete_progress"):
                        c.execute(Q[query], {"job_id": row.record["job_id"]})
            deleted += len(rows)
            if len(rows) < batch:
                return deleted

    def put_record(self, record: Mapping[str, Any]) -> None:
        with self._cursor(write=True) as c:
            self._put_job(c, record, "put_record")

    def delete(self, job_id: str) -> None:
        with self._cursor(write=True) as c:
            for query in ("delete_job", "delete_progress"):
                c.execute(Q[query], {"job_id": job_id})

    def hold_budgets(self, keys: Sequence[str]) -> None:
        """Nothing to lock: an admitted create already holds the file's write lock."""
