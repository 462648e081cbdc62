"""The PostgreSQL store: many API replicas and workers on many hosts, one database.

Same contract and semantics as the embedded SQLite store (``tests/contract``
runs one suite against both). Tables, in schema ``nw_jobs`` (see
``pg_migrations/0001_init.sql``): ``jobs`` (the index), ``status`` (the au
``ComputationStore``), ``durations``, ``progress``, ``runners``.

Namespacing. Projects share one database; every row carries the project's
``project_id``, the random id written once into ``<root>/.nw/project.json``.
It is the same on every host that mounts the project, whatever the path, so
a worker on another machine sees the same jobs (and computes the same job
ids). Two folders that are copies of one project share its id, and therefore
its jobs: give a copy its own ``project.json`` to split them.

Schema. Created and upgraded only by ``migrate`` (``nw-jobs db migrate``, or
``python -m nw.jobs.stores.postgres migrate URL``), never as a side effect:
opening a store, for reading or for writing, against a database that was
not migrated to this code's version raises ``JobStoreError`` saying so. Why
not migrate on the first write, as the embedded store creates its file? With
many hosts, the first replica of a new release to enqueue would upgrade the
schema under the old replicas still running; the upgrade belongs to the
deploy step, once, and ``migrate`` is safe to run there from every host.

Concurrency, in one statement per transition where possible:

* dedup: the primary key ``(project_id, job_id)`` is the constraint; ``create``
  is ``INSERT … ON CONFLICT DO NOTHING``, and only when that conflicts does it
  lock the existing row to decide (live: returned; finished: replaced, the
  new run carrying ``attempt`` and spend over), from the locked row's own
  columns (the status row read alongside may predate the lock).
* claims: ``SELECT … FOR UPDATE SKIP LOCKED`` over the small partial index of
  due queued jobs, ``limit`` jobs per statement, moved to running in the same
  statement; a ``lease`` token lets a claim whose reply was lost with the
  connection recover exactly the jobs it took instead of orphaning them.
* fencing: every fenced write is ``UPDATE … WHERE attempt = %s``.
* lock order: a statement locks the ``jobs`` row before the ``status`` row
  (the status update reads from the jobs update), so transitions do not
  deadlock; a deadlock or serialization failure is retried anyway.
* waking: ``create`` of a claimable job sends ``NOTIFY nw_jobs_<project>`` in
  the same statement (delivered at commit); workers ``LISTEN`` on it.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from au import ComputationResult, ComputationStatus
from psycopg.types.json import Jsonb

from nw.canonical import stored_json
from nw.jobs.errors import JobStoreError
from nw.jobs.records import JobRow
from nw.jobs.stores.base import COLUMNS, JobStore, actor_id_of, carry_over, split_record
from nw.jobs.stores.pg_connect import (
    Database,
    GroupCommit,
    PgWakeListener,
    RetryNow,
    close_pools,
    migrate,
    transaction,
)

__all__ = ["PostgresJobStore", "close_pools", "migrate", "open_postgres_store"]

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LIVE = ("queued", "running", "cancelling")

# ----- named queries ---------------------------------------------------------------
_ROW = (
    "j.job_id, j.created_at, j.kind, j.attempt, j.cancel_requested, j.started_at,"
    " j.finished_at, j.heartbeat_at, j.runner_id, j.doc, s.status, s.value, s.error"
)
# The status entry is looked up per job row (LATERAL: a primary-key probe), so a
# page reads its 50 rows from one ordered index and 50 status rows, whatever
# the planner believes about the size of the project.
_SELECT = (
    f"SELECT {_ROW} FROM nw_jobs.jobs j LEFT JOIN LATERAL (SELECT t.status, t.value, t.error"
    " FROM nw_jobs.status t WHERE t.project_id = j.project_id AND t.job_id = j.job_id LIMIT 1) s"
    " ON true"
)
_GET = _SELECT + " WHERE j.project_id = %(p)s AND j.job_id = %(id)s"
# ``create`` locks the existing row to decide. After waiting for the lock,
# PostgreSQL re-reads the locked ``jobs`` row but not the LATERAL status row
# (it keeps the version of the statement's snapshot), so liveness is decided
# from the locked row's own columns: ``state`` (generated from ``au_status``,
# which every transition writes with the status row) and ``au_status``.
_LOCK = (
    f"SELECT {_ROW}, j.state, j.au_status FROM nw_jobs.jobs j LEFT JOIN LATERAL"
    " (SELECT t.status, t.value, t.error FROM nw_jobs.status t"
    "  WHERE t.project_id = j.project_id AND t.job_id = j.job_id LIMIT 1) s ON true"
    " WHERE j.project_id = %(p)s AND j.job_id = %(id)s FOR UPDATE OF j"
)
_BY_LEASE = _SELECT + " WHERE j.project_id = %(p)s AND j.lease = %(tok)s ORDER BY j.job_id"

# The record's column fields as a JSON patch ``c`` (absent key: unchanged) and
# its doc fields as ``d`` (merged at the top level): one fixed statement text
# per transition, whatever fields it carries, so every one is prepared once.
_NUM = "double precision"
_SET_FIELDS = (
    ", ".join(
        f"{name} = CASE WHEN p.c ? '{name}' THEN (p.c->>'{name}')::{typ} ELSE j.{name} END"
        for name, typ in (
            ("created_at", _NUM),
            ("kind", "text"),
            ("idempotency_key", "text"),
            ("actor_id", "text"),
            ("attempt", "integer"),
            ("cancel_requested", "boolean"),
            ("started_at", _NUM),
            ("finished_at", _NUM),
            ("heartbeat_at", _NUM),
            ("runner_id", "text"),
        )
    )
    + ", doc = j.doc || p.d"
)
_FENCE = (
    "j.project_id = %(p)s AND j.job_id = %(id)s AND j.attempt = coalesce(%(a)s::integer, j.attempt)"
)
_PATCH = (
    "WITH p AS (SELECT %(c)s::jsonb AS c, %(d)s::jsonb AS d)"
    f" UPDATE nw_jobs.jobs j SET {_SET_FIELDS} FROM p WHERE {_FENCE}"
)
_FINISH = (
    "WITH p AS (SELECT %(c)s::jsonb AS c, %(d)s::jsonb AS d),"
    f" jb AS (UPDATE nw_jobs.jobs j SET {_SET_FIELDS}, au_status = %(st)s, queue_at = NULL"
    f"  FROM p WHERE {_FENCE} RETURNING j.job_id),"
    " sb AS (UPDATE nw_jobs.status s SET status = %(st)s, value = %(v)s, error = %(e)s,"
    "  completed_at = now() FROM jb WHERE s.project_id = %(p)s AND s.job_id = jb.job_id)"
    " SELECT count(*) FROM jb"
)
# Many finishes in one statement (the group commit of ``finish``): the batch is
# a JSON array of {id, a (attempt), st, v (result), e (error), c, d}.
_FINISH_MANY = (
    "WITH p AS (SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb)"
    "  AS x(id text, a integer, st text, v jsonb, e text, c jsonb, d jsonb)),"
    f" jb AS (UPDATE nw_jobs.jobs j SET {_SET_FIELDS}, au_status = p.st, queue_at = NULL"
    "  FROM p WHERE j.project_id = %(p)s AND j.job_id = ANY(%(ids)s::text[])"
    "  AND j.job_id = p.id AND j.attempt = coalesce(p.a, j.attempt) RETURNING j.job_id),"
    " sb AS (UPDATE nw_jobs.status s SET status = p.st, value = p.v, error = p.e,"
    "  completed_at = now() FROM jb JOIN p ON p.id = jb.job_id"
    "  WHERE s.project_id = %(p)s AND s.job_id = ANY(%(ids)s::text[])"
    "  AND s.job_id = jb.job_id)"
    " SELECT job_id FROM jb"
)
_REQUEUE = (
    "WITH p AS (SELECT %(c)s::jsonb AS c, %(d)s::jsonb AS d),"
    f" jb AS (UPDATE nw_jobs.jobs j SET {_SET_FIELDS}, au_status = 'pending',"
    "  queue_at = %(nb)s, lease = NULL"
    f"  FROM p WHERE {_FENCE} RETURNING j.job_id),"
    " sb AS (UPDATE nw_jobs.status s SET status = 'pending', value = NULL, error = NULL,"
    "  completed_at = NULL FROM jb WHERE s.project_id = %(p)s AND s.job_id = jb.job_id)"
    " SELECT count(*) FROM jb"
)
_INSERT_COLS = (
    "project_id, job_id, created_at, kind, idempotency_key, actor_id, attempt,"
    " cancel_requested, started_at, finished_at, heartbeat_at, runner_id, doc"
)
_INSERT_VALS = (
    "%(p)s, %(id)s, %(created_at)s, %(kind)s, %(idem)s, %(actor_id)s, %(attempt)s,"
    " %(cancel_requested)s, %(started_at)s, %(finished_at)s, %(heartbeat_at)s,"
    " %(runner_id)s, %(doc)s"
)
_CREATE = (
    f"WITH jb AS (INSERT INTO nw_jobs.jobs ({_INSERT_COLS}, au_status, queue_at)"
    f"  VALUES ({_INSERT_VALS}, 'pending', %(q)s)"
    "  ON CONFLICT (project_id, job_id) DO NOTHING RETURNING job_id),"
    " sb AS (INSERT INTO nw_jobs.status (project_id, job_id, status, created_at, attempt)"
    "  SELECT %(p)s, job_id, 'pending', to_timestamp(%(created_at)s), %(attempt)s FROM jb"
    "  ON CONFLICT (project_id, job_id) DO UPDATE SET status = 'pending', value = NULL,"
    "  error = NULL, terminal_reason = NULL, created_at = excluded.created_at,"
    "  completed_at = NULL, attempt = excluded.attempt)"
    " SELECT (SELECT count(*) FROM jb),"
    "  (SELECT count(*) FROM (SELECT pg_notify(%(chan)s, %(kind)s) FROM jb"
    "   WHERE %(q)s::double precision IS NOT NULL) n)"
)
_REPLACE = (
    f"WITH jb AS (UPDATE nw_jobs.jobs j SET ({_INSERT_COLS}, au_status, queue_at, lease) ="
    f"  ({_INSERT_VALS}, 'pending', %(q)s, NULL)"
    "  WHERE j.project_id = %(p)s AND j.job_id = %(id)s RETURNING j.job_id),"
    " pb AS (DELETE FROM nw_jobs.progress WHERE project_id = %(p)s AND job_id = %(id)s),"
    " sb AS (INSERT INTO nw_jobs.status (project_id, job_id, status, created_at, attempt)"
    "  SELECT %(p)s, job_id, 'pending', to_timestamp(%(created_at)s), %(attempt)s FROM jb"
    "  ON CONFLICT (project_id, job_id) DO UPDATE SET status = 'pending', value = NULL,"
    "  error = NULL, terminal_reason = NULL, created_at = excluded.created_at,"
    "  completed_at = NULL, attempt = excluded.attempt)"
    " SELECT (SELECT count(*) FROM (SELECT pg_notify(%(chan)s, %(kind)s) FROM jb"
    "  WHERE %(q)s::double precision IS NOT NULL) n)"
)
_START_SET = (
    "UPDATE nw_jobs.jobs j SET attempt = j.attempt + 1, au_status = 'running',"
    " started_at = %(now)s, heartbeat_at = %(now)s, runner_id = %(r)s, lease = %(tok)s,"
    " queue_at = NULL FROM picked WHERE j.project_id = %(p)s AND j.job_id = picked.job_id"
    " RETURNING j.*"
)
_START_STATUS = (
    "UPDATE nw_jobs.status s SET status = 'running', attempt = s.attempt + 1"
    " FROM jb WHERE s.project_id = %(p)s AND s.job_id = jb.job_id"
    " RETURNING s.job_id, s.status, s.value, s.error"
)
_START_RESULT = (
    "SELECT jb.job_id, jb.created_at, jb.kind, jb.attempt, jb.cancel_requested, jb.started_at,"
    " jb.finished_at, jb.heartbeat_at, jb.runner_id, jb.doc, sb.status, sb.value, sb.error"
    " FROM jb JOIN picked USING (job_id) LEFT JOIN sb USING (job_id)"
    " ORDER BY picked.queue_at, jb.job_id"
)
_START = (
    "WITH picked AS (SELECT job_id, 0 AS queue_at FROM nw_jobs.jobs"
    "  WHERE project_id = %(p)s AND job_id = %(id)s AND au_status = 'pending'"
    "  AND NOT cancel_requested FOR UPDATE),"
    f" jb AS ({_START_SET}), sb AS ({_START_STATUS}) {_START_RESULT}"
)
_CLAIM = (
    "WITH picked AS (SELECT job_id, queue_at FROM nw_jobs.jobs"
    "  WHERE project_id = %(p)s AND queue_at IS NOT NULL AND queue_at <= %(now)s"
    "  AND kind = ANY(%(kinds)s::text[]) AND NOT cancel_requested"
    "  ORDER BY queue_at, job_id LIMIT %(n)s FOR UPDATE SKIP LOCKED),"
    f" jb AS ({_START_SET}), sb AS ({_START_STATUS}) {_START_RESULT}"
)
_CANCEL = (
    "WITH cur AS (SELECT job_id, au_status = 'pending' AS queued FROM nw_jobs.jobs"
    "  WHERE project_id = %(p)s AND job_id = %(id)s AND NOT cancel_requested"
    "  AND au_status IN ('pending', 'running') FOR UPDATE),"
    " jb AS (UPDATE nw_jobs.jobs j SET cancel_requested = true, au_status = 'cancelled',"
    "  queue_at = NULL,"
    "  finished_at = CASE WHEN cur.queued THEN %(now)s ELSE j.finished_at END,"
    "  doc = CASE WHEN cur.queued THEN j.doc || %(d)s::jsonb ELSE j.doc END"
    "  FROM cur WHERE j.project_id = %(p)s AND j.job_id = cur.job_id RETURNING j.job_id),"
    " sb AS (UPDATE nw_jobs.status s SET status = 'cancelled',"
    "  terminal_reason = 'cancel requested'"
    "  FROM jb WHERE s.project_id = %(p)s AND s.job_id = jb.job_id)"
    " SELECT count(*) FROM jb"
)
_BEAT = (
    "WITH rb AS (UPDATE nw_jobs.runners SET beat_at = %(now)s"
    "  WHERE project_id = %(p)s AND runner_id = %(r)s),"
    " jb AS (UPDATE nw_jobs.jobs SET heartbeat_at = %(now)s"
    "  WHERE project_id = %(p)s AND job_id = ANY(%(ids)s::text[]) AND finished_at IS NULL"
    "  AND runner_id = %(r)s)"
    " SELECT job_id FROM nw_jobs.jobs"
    " WHERE project_id = %(p)s AND job_id = ANY(%(ids)s::text[])"
    "  AND (cancel_requested OR finished_at IS NOT NULL OR runner_id IS DISTINCT FROM %(r)s)"
)
_PUT_RECORD = (
    f"WITH jb AS (INSERT INTO nw_jobs.jobs ({_INSERT_COLS}, au_status)"
    f"  VALUES ({_INSERT_VALS}, coalesce((SELECT status FROM nw_jobs.status"
    "   WHERE project_id = %(p)s AND job_id = %(id)s), 'pending'))"
    "  ON CONFLICT (project_id, job_id) DO UPDATE SET created_at = excluded.created_at,"
    "  kind = excluded.kind, idempotency_key = excluded.idempotency_key,"
    "  actor_id = excluded.actor_id, attempt = excluded.attempt,"
    "  cancel_requested = excluded.cancel_requested, started_at = excluded.started_at,"
    "  finished_at = excluded.finished_at, heartbeat_at = excluded.heartbeat_at,"
    "  runner_id = excluded.runner_id, doc = excluded.doc RETURNING job_id)"
    " INSERT INTO nw_jobs.status (project_id, job_id, status, created_at)"
    " SELECT %(p)s, job_id, 'pending', to_timestamp(%(created_at)s) FROM jb"
    " ON CONFLICT (project_id, job_id) DO NOTHING"
)
_PUT_STATUS = (
    "WITH jb AS (UPDATE nw_jobs.jobs SET au_status = %(st)s, queue_at = NULL"
    "  WHERE project_id = %(p)s AND job_id = %(id)s RETURNING 1)"
    " INSERT INTO nw_jobs.status (project_id, job_id, status, value, error, terminal_reason,"
    "  created_at, completed_at)"
    " SELECT %(p)s, %(id)s, %(st)s, %(v)s::jsonb, %(e)s::text, %(tr)s::text,"
    "  %(ca)s::timestamptz, %(co)s::timestamptz"
    "  FROM (SELECT count(*) FROM jb) locked_first"
    " ON CONFLICT (project_id, job_id) DO UPDATE SET status = excluded.status,"
    "  value = excluded.value, error = excluded.error,"
    "  terminal_reason = excluded.terminal_reason, completed_at = excluded.completed_at"
)
_DELETE = (
    "WITH jb AS (DELETE FROM nw_jobs.jobs WHERE project_id = %(p)s AND job_id = %(id)s),"
    " pb AS (DELETE FROM nw_jobs.progress WHERE project_id = %(p)s AND job_id = %(id)s)"
    " DELETE FROM nw_jobs.status WHERE project_id = %(p)s AND job_id = %(id)s"
)
_PURGE = (
    "WITH jb AS (DELETE FROM nw_jobs.jobs WHERE project_id = %(p)s RETURNING 1),"
    " sb AS (DELETE FROM nw_jobs.status WHERE project_id = %(p)s),"
    " pb AS (DELETE FROM nw_jobs.progress WHERE project_id = %(p)s),"
    " db AS (DELETE FROM nw_jobs.durations WHERE project_id = %(p)s),"
    " rb AS (DELETE FROM nw_jobs.runners WHERE project_id = %(p)s)"
    " SELECT count(*) FROM jb"
)
# Mirrors the embedded store: a missing or non-false lower-bound flag on a
# finished job makes the total a lower bound ("unreported" is not "exact").
_USD = "CASE WHEN jsonb_typeof(doc->'{0}') = 'number' THEN (doc->>'{0}')::double precision END"
_SPEND = (
    "SELECT coalesce(sum(coalesce(" + _USD.format("prior_actual_usd") + ", 0)"
    "   + coalesce(" + _USD.format("earlier_runs_usd") + ", 0)"
    "   + CASE WHEN finished_at IS NULL THEN 0"
    "     ELSE coalesce(" + _USD.format("actual_usd") + ", 0) END), 0.0),"
    " coalesce(bool_or(finished_at IS NOT NULL AND started_at IS NOT NULL"
    "   AND coalesce(doc->'actual_is_lower_bound' NOT IN ('false'::jsonb, '0'::jsonb), true)),"
    "   false),"
    " coalesce(sum(CASE WHEN finished_at IS NULL THEN " + _USD.format("estimated_usd") + " END),"
    "   0.0),"
    " count(*) FILTER (WHERE finished_at IS NULL AND jsonb_typeof(doc->'estimated_usd')"
    "   IS DISTINCT FROM 'number')"
    " FROM nw_jobs.jobs WHERE project_id = %(p)s"
)
_SAMPLES = (
    "SELECT k.key, ARRAY(SELECT d.seconds FROM nw_jobs.durations d"
    "  WHERE d.project_id = %(p)s AND d.key = k.key ORDER BY d.at DESC, d.id DESC LIMIT %(w)s)"
    " FROM unnest(%(keys)s::text[]) AS k(key)"
)
_ADD_SAMPLES = (
    "WITH ins AS (INSERT INTO nw_jobs.durations (project_id, key, at, seconds)"
    "  SELECT %(p)s, k, %(now)s, s FROM unnest(%(keys)s::text[], %(secs)s::float8[]) AS u(k, s))"
    " DELETE FROM nw_jobs.durations d USING unnest(%(keys)s::text[]) AS k(key)"
    " WHERE d.project_id = %(p)s AND d.key = k.key AND d.id NOT IN"
    "  (SELECT id FROM nw_jobs.durations WHERE project_id = %(p)s AND key = k.key"
    "   ORDER BY at DESC, id DESC LIMIT greatest(%(w)s - 1, 0))"
)
# The retried forms (the first try may have committed before its reply was
# lost): a sample or beat already there is not written twice. Only a retry
# pays for the check.
_ADD_SAMPLES_RETRY = (
    "INSERT INTO nw_jobs.durations (project_id, key, at, seconds)"
    " SELECT %(p)s, k, %(now)s, s FROM unnest(%(keys)s::text[], %(secs)s::float8[]) AS u(k, s)"
    " WHERE NOT EXISTS (SELECT 1 FROM nw_jobs.durations d WHERE d.project_id = %(p)s"
    "  AND d.key = u.k AND d.at = %(now)s AND d.seconds = u.s)"
)
_PRUNE_SAMPLES = (
    "DELETE FROM nw_jobs.durations d USING unnest(%(keys)s::text[]) AS k(key)"
    " WHERE d.project_id = %(p)s AND d.key = k.key AND d.id NOT IN"
    "  (SELECT id FROM nw_jobs.durations WHERE project_id = %(p)s AND key = k.key"
    "   ORDER BY at DESC, id DESC LIMIT %(w)s)"
)
_APPEND_PROGRESS = (
    "INSERT INTO nw_jobs.progress (project_id, job_id, attempt, ts, pct, message, stage)"
    " SELECT %(p)s, %(id)s, %(a)s::integer, %(ts)s::double precision,"
    " %(pct)s::double precision, %(msg)s::text, %(stage)s::jsonb FROM nw_jobs.jobs j"
    f" WHERE {_FENCE}"
)

_APPEND_PROGRESS_RETRY = (
    "WITH dup AS (SELECT 1 FROM nw_jobs.progress WHERE project_id = %(p)s AND job_id = %(id)s"
    "  AND attempt IS NOT DISTINCT FROM %(a)s::integer AND ts = %(ts)s::double precision"
    "  AND pct IS NOT DISTINCT FROM %(pct)s::double precision"
    "  AND message IS NOT DISTINCT FROM %(msg)s::text LIMIT 1),"
    f" ins AS ({_APPEND_PROGRESS} AND NOT EXISTS (SELECT 1 FROM dup) RETURNING 1)"
    " SELECT (SELECT count(*) FROM dup) + (SELECT count(*) FROM ins)"
)


def _rowcount(cur: psycopg.Cursor) -> int:
    return cur.rowcount


def _scalar(cur: psycopg.Cursor) -> Any:
    row = cur.fetchone()
    return None if row is None else row[0]


def _dumps(value: Any) -> str:
    return stored_json(value)


def _jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=_dumps)


def channel_for(project_id: str) -> str:
    """The NOTIFY channel of a project (a valid identifier, <= 63 bytes)."""
    if re.fullmatch(r"[A-Za-z0-9_]{1,48}", project_id):
        return f"nw_jobs_{project_id.lower()}"
    import hashlib

    return "nw_jobs_" + hashlib.sha256(project_id.encode()).hexdigest()[:40]


class PostgresJobStore(JobStore):
    """One project's jobs in a PostgreSQL database (see the module docstring)."""

    def __init__(
        self,
        url: str,
        project_id: str,
        *,
        read_only: bool = False,
        retry_s: float | None = None,
    ):
        if not isinstance(project_id, str) or not project_id:
            raise ValueError("a PostgreSQL job store needs the project's id")
        self.db = Database(url, retry_s=retry_s)
        self.project_id = project_id
        self.read_only = read_only
        self.channel = channel_for(project_id)
        self._tls = threading.local()
        self._finishes = GroupCommit(self._finish_many, key=lambda item: item["id"])
        self.db.check_schema()

    def __repr__(self) -> str:
        return f"PostgresJobStore({self.db.display!r}, project_id={self.project_id!r})"

    # ----- plumbing ----------------------------------------------------------------
    def _read(self, what: str, query: str, args: Mapping[str, Any]) -> list[tuple]:
        params = {"p": self.project_id, **args}
        conn = getattr(self._tls, "conn", None)
        if conn is not None:  # inside this thread's admitted create: same transaction
            return conn.execute(query, params).fetchall()
        return self.db.run(lambda c, _r: c.execute(query, params).fetchall(), what=what)

    def _write(self, what: str, fn) -> Any:
        if self.read_only:
            raise JobStoreError("this job store was opened read-only")
        return self.db.run(fn, what=what)

    def _exec(self, what: str, query: str, args: Mapping[str, Any], get=None) -> Any:
        """One write statement; ``get(cursor)`` reads its result before the
        connection goes back to the pool."""
        params = {"p": self.project_id, **args}

        def op(conn: psycopg.Connection, _retried: bool) -> Any:
            cur = conn.execute(query, params)
            return None if get is None else get(cur)

        return self._write(what, op)

    def close(self) -> None:
        """Nothing to release per store: the pool is per URL (``close_pools``)."""

    # ----- decoding --------------------------------------------------------------------
    @staticmethod
    def _row(r: Sequence[Any]) -> JobRow:
        record = dict(r[9]) if isinstance(r[9], dict) else {}
        for name, value in zip(COLUMNS, r[:9], strict=True):
            record[name] = value
        au_status, value, error = r[10], r[11], r[12]
        if au_status is None:
            return JobRow(record, "failed", None, "the job's status entry is missing")
        return JobRow(record, au_status, value, error)

    def _patch_args(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        cols, doc = self._patch_fields(fields)
        return {"c": _jsonb(cols), "d": _jsonb(doc)}

    @staticmethod
    def _patch_fields(fields: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(column fields, doc fields) of a patch, with the mirrored columns."""
        cols: dict[str, Any] = {}
        doc: dict[str, Any] = {}
        for name, value in fields.items():
            if not isinstance(name, str) or not _FIELD_NAME.fullmatch(name):
                raise ValueError(f"not a record field name: {name!r}")
            if name == "job_id":
                continue
            if name in COLUMNS:
                cols[name] = bool(value) if name == "cancel_requested" else value
            else:
                doc[name] = value
        if "actor" in fields:
            cols["actor_id"] = actor_id_of(fields)
        if "idempotency_key" in fields:
            key = fields["idempotency_key"]
            cols["idempotency_key"] = key if isinstance(key, str) else None
        return cols, doc

    def _insert_args(self, record: Mapping[str, Any]) -> dict[str, Any]:
        cols, doc = split_record(record)
        key = record.get("idempotency_key")
        return {
            **cols,
            "id": cols["job_id"],
            "idem": key if isinstance(key, str) else None,
            "actor_id": actor_id_of(record),
            "doc": _jsonb(doc),
            "chan": self.channel,
        }

    # ----- reads -----------------------------------------------------------------------
    def get(self, job_id: str) -> JobRow | None:
        rows = self._read("get", _GET, {"id": job_id})
        return self._row(rows[0]) if rows else None

    def page(
        self, *, status: str | None = None, actor_id: str | None = None, limit: int = 50
    ) -> list[JobRow]:
        where = ["j.project_id = %(p)s"]
        if status is not None:
            where.append("j.state = %(st)s")
        if actor_id is not None:
            where.append("j.actor_id = %(actor)s")
        sql = (
            f"{_SELECT} WHERE {' AND '.join(where)}"
            " ORDER BY j.created_at DESC, j.job_id DESC LIMIT %(n)s"
        )
        args = {"st": None if status is None else str(status), "actor": actor_id, "n": int(limit)}
        return [self._row(r) for r in self._read("page", sql, args)]

    def live(self) -> list[JobRow]:
        sql = (
            f"{_SELECT} WHERE j.project_id = %(p)s AND j.finished_at IS NULL"
            " ORDER BY j.created_at, j.job_id"
        )
        return [self._row(r) for r in self._read("live", sql, {})]

    def iter_ids(self) -> Iterator[str]:
        rows = self._read(
            "iter_ids",
            "SELECT job_id FROM nw_jobs.jobs WHERE project_id = %(p)s"
            " ORDER BY created_at DESC, job_id DESC",
            {},
        )
        return iter([r[0] for r in rows])

    # ----- transitions -------------------------------------------------------------------
    def create(
        self,
        record: dict[str, Any],
        *,
        claimable: bool,
        admit: Callable[[], None] | None = None,
    ) -> tuple[JobRow, bool]:
        if admit is not None:
            return self._create_admitted(record, claimable=claimable, admit=admit)
        args = self._insert_args(record)
        args["q"] = record["created_at"] if claimable else None
        run_id = record.get("run_id")

        def op(conn: psycopg.Connection, retried: bool) -> tuple[JobRow, bool]:
            params = {"p": self.project_id, **args}
            inserted, _notified = conn.execute(_CREATE, params).fetchone()
            if inserted:
                return JobRow(dict(record), "pending"), True
            with conn.transaction():  # it exists: lock it and decide
                got = self._lock(conn, params)
                if got is None:  # deleted meanwhile: try again from the top
                    raise RetryNow("the job vanished during create")
                existing, live = got
                if live:
                    # A retry whose first try committed finds its own run: created.
                    mine = (
                        retried and run_id is not None and existing.record.get("run_id") == run_id
                    )
                    return existing, mine
                return self._replace(conn, params, record, existing)

        row, created = self._write("create", op)
        # A created claimable job was announced by its own statement (at commit),
        # so the facade's wake_workers() right after has nothing left to do.
        self._tls.notified = created and claimable
        return row, created

    def _lock(
        self, conn: psycopg.Connection, params: Mapping[str, Any]
    ) -> tuple[JobRow, bool] | None:
        """Lock the job's ``jobs`` row (inside the caller's transaction): its row
        and whether it is live, or None when there is no such job."""
        r = conn.execute(_LOCK, params).fetchone()
        if r is None:
            return None
        state, au_status = r[13], r[14]
        if r[10] != au_status:  # the status row predates the lock: read it again
            r = conn.execute(_GET, params).fetchone() or r
        # no status entry reads as failed (see ``_row``): a new run may replace it
        return self._row(r), r[10] is not None and state in _LIVE

    def _replace(
        self,
        conn: psycopg.Connection,
        params: Mapping[str, Any],
        record: Mapping[str, Any],
        old: JobRow,
    ) -> tuple[JobRow, bool]:
        """Replace the locked finished job by a new run (it carries ``attempt``
        and spend over, see ``carry_over``)."""
        new = {**record, **carry_over(old.record)}
        conn.execute(_REPLACE, {**params, **self._insert_args(new)})
        return JobRow(dict(new), "pending"), True

    def _create_admitted(
        self, record: dict[str, Any], *, claimable: bool, admit: Callable[[], None]
    ) -> tuple[JobRow, bool]:
        """``create`` with the budget gate inside: creates of the project are
        serialised by a transaction-scoped advisory lock on the project, and
        ``admit`` reads through this same transaction (see ``_read``)."""
        args = {"p": self.project_id, **self._insert_args(record)}
        args["q"] = record["created_at"] if claimable else None
        run_id = record.get("run_id")

        def op(conn: psycopg.Connection, retried: bool) -> tuple[JobRow, bool]:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%(p)s))", args)
                got = self._lock(conn, args)
                if got is not None and got[1]:
                    existing = got[0]
                    mine = (
                        retried and run_id is not None and existing.record.get("run_id") == run_id
                    )
                    return existing, mine
                self._tls.conn = conn
                try:
                    admit()  # an exception rolls the transaction back: nothing written
                finally:
                    self._tls.conn = None
                if got is None:
                    inserted, _notified = conn.execute(_CREATE, args).fetchone()
                    if not inserted:  # a create without the gate got in first: decide again
                        raise RetryNow("the job appeared during create")
                    return JobRow(dict(record), "pending"), True
                return self._replace(conn, args, record, got[0])

        row, created = self._write("create", op)
        self._tls.notified = created and claimable
        return row, created

    def start(self, job_id: str, *, now: float, runner_id: str) -> JobRow | None:
        args = {"p": self.project_id, "id": job_id, "now": now, "r": runner_id}
        args["tok"] = uuid.uuid4().hex

        def op(conn: psycopg.Connection, retried: bool) -> JobRow | None:
            if retried:  # the first try may have committed before the connection died
                got = conn.execute(_BY_LEASE, args).fetchall()
                if got:
                    return self._row(got[0])
            r = conn.execute(_START, args).fetchone()
            return None if r is None else self._row(r)

        return self._write("start", op)

    def claim(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> list[JobRow]:
        if not kinds or limit < 1:
            return []
        args = {
            "p": self.project_id,
            "kinds": list(kinds),
            "now": now,
            "r": runner_id,
            "n": int(limit),
            "tok": uuid.uuid4().hex,
        }

        def op(conn: psycopg.Connection, retried: bool) -> list[JobRow]:
            if retried:
                got = conn.execute(_BY_LEASE, args).fetchall()
                if got:
                    return [self._row(r) for r in got]
            return [self._row(r) for r in conn.execute(_CLAIM, args).fetchall()]

        return self._write("claim", op)

    def patch(self, job_id: str, fields: Mapping[str, Any], *, attempt: int | None) -> bool:
        args = {"id": job_id, "a": attempt, **self._patch_args(fields)}
        return self._exec("patch", _PATCH, args, _rowcount) > 0

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
        if self.read_only:
            raise JobStoreError("this job store was opened read-only")
        cols, doc = self._patch_fields(fields)
        item = {
            "id": job_id,
            "a": attempt,
            "st": ComputationStatus(au_status).value,
            "v": result,
            "e": error,
            "c": cols,
            "d": doc,
        }
        _dumps(result)  # not JSON: refuse this call alone, before it joins a batch
        return self._finishes.submit(item)

    def _finish_many(self, items: list[dict[str, Any]]) -> list[Any]:
        """One statement for a batch of finishes; on a database error other than
        a lost connection, each item again alone (so one bad item fails alone)."""
        try:
            done = self._exec(
                "finish",
                _FINISH_MANY,
                {"batch": _jsonb(items), "ids": [item["id"] for item in items]},
                lambda cur: {r[0] for r in cur.fetchall()},
            )
            return [item["id"] in done for item in items]
        except JobStoreError as exc:
            if len(items) == 1 or "unreachable" in str(exc):
                raise
        out: list[Any] = []
        for item in items:
            try:
                out.extend(self._finish_many([item]))
            except JobStoreError as exc:
                out.append(exc)
        return out

    def requeue(
        self, job_id: str, *, fields: Mapping[str, Any], not_before: float, attempt: int
    ) -> bool:
        fields = {**fields, "started_at": None, "heartbeat_at": None}
        args = {"id": job_id, "a": attempt, "nb": not_before, **self._patch_args(fields)}
        return self._exec("requeue", _REQUEUE, args, _scalar) > 0

    def request_cancel(self, job_id: str, *, now: float) -> JobRow | None:
        args = {
            "p": self.project_id,
            "id": job_id,
            "now": now,
            "d": _jsonb({"error": "cancelled before start", "error_kind": "cancelled"}),
        }

        def op(conn: psycopg.Connection, _retried: bool) -> JobRow | None:
            with transaction(conn):
                conn.execute(_CANCEL, args)
                r = conn.execute(_GET, args).fetchone()
            return None if r is None else self._row(r)

        return self._write("request_cancel", op)

    def beat(self, job_ids: Iterable[str], *, now: float, runner_id: str) -> set[str]:
        args = {"ids": list(job_ids), "now": now, "r": runner_id}
        return self._exec("beat", _BEAT, args, lambda cur: {r[0] for r in cur.fetchall()})

    # ----- learning, progress, runners ---------------------------------------------------
    def samples(self, keys: Sequence[str], *, window: int) -> dict[str, list[float]]:
        if not keys:
            return {}
        rows = self._read("samples", _SAMPLES, {"keys": list(keys), "w": int(window)})
        got = {k: list(reversed(v)) for k, v in rows}
        return {k: got.get(k, []) for k in keys}

    def add_samples(self, samples: Mapping[str, float], *, now: float, window: int) -> None:
        if not samples:
            return
        keys = list(samples)
        args = {
            "keys": keys,
            "secs": [float(samples[k]) for k in keys],
            "now": now,
            "w": int(window),
            "p": self.project_id,
        }

        def op(conn: psycopg.Connection, retried: bool) -> None:
            if not retried:
                conn.execute(_ADD_SAMPLES, args)
                return
            with conn.transaction():
                conn.execute(_ADD_SAMPLES_RETRY, args)
                conn.execute(_PRUNE_SAMPLES, args)

        self._write("add_samples", op)

    def append_progress(self, job_id: str, beat: Mapping[str, Any], *, attempt: int | None) -> bool:
        stage = beat.get("stage")
        args = {
            "id": job_id,
            "a": attempt,
            "ts": beat["ts"],
            "pct": beat.get("pct"),
            "msg": beat.get("message"),
            "stage": None if stage is None else _jsonb(stage),
            "p": self.project_id,
        }

        def op(conn: psycopg.Connection, retried: bool) -> bool:
            if retried:
                return conn.execute(_APPEND_PROGRESS_RETRY, args).fetchone()[0] > 0
            return conn.execute(_APPEND_PROGRESS, args).rowcount > 0

        return self._write("append_progress", op)

    def progress(self, job_id: str, *, limit: int) -> list[dict[str, Any]]:
        rows = self._read(
            "progress",
            "SELECT ts, pct, message, stage, attempt FROM nw_jobs.progress"
            " WHERE project_id = %(p)s AND job_id = %(id)s ORDER BY seq DESC LIMIT %(n)s",
            {"id": job_id, "n": int(limit)},
        )
        return [
            {"ts": ts, "pct": pct, "message": msg, "stage": stage, "attempt": att}
            for ts, pct, msg, stage, att in reversed(rows)
        ]

    def register_runner(self, runner_id: str, info: Mapping[str, Any], *, now: float) -> None:
        self._exec(
            "register_runner",
            "INSERT INTO nw_jobs.runners (project_id, runner_id, info, started_at, beat_at)"
            " VALUES (%(p)s, %(r)s, %(info)s, %(now)s, %(now)s)"
            " ON CONFLICT (project_id, runner_id) DO UPDATE SET info = excluded.info,"
            " started_at = excluded.started_at, beat_at = excluded.beat_at",
            {"r": runner_id, "info": _jsonb(dict(info)), "now": now},
        )

    def unregister_runner(self, runner_id: str) -> None:
        self._exec(
            "unregister_runner",
            "DELETE FROM nw_jobs.runners WHERE project_id = %(p)s AND runner_id = %(r)s",
            {"r": runner_id},
        )

    def runners(self) -> list[dict[str, Any]]:
        rows = self._read(
            "runners",
            "SELECT runner_id, info, started_at, beat_at FROM nw_jobs.runners"
            " WHERE project_id = %(p)s ORDER BY started_at, runner_id",
            {},
        )
        return [
            {**info, "runner_id": rid, "started_at": st, "beat_at": beat}
            for rid, info, st, beat in rows
        ]

    def spend(self) -> dict[str, Any]:
        actual, lower, live, unknown = self._read("spend", _SPEND, {})[0]
        return {
            "actual_usd": float(actual),
            "live_estimated_usd": float(live),
            "live_unknown": int(unknown),
            "lower_bound": bool(lower),
        }

    # ----- waking idle workers ----------------------------------------------------------
    def wake_listener(self, runner_id: str) -> PgWakeListener:
        """``LISTEN`` on this project's channel (one dedicated connection); a
        worker serving more projects adds theirs with ``listener.also(store)``."""
        return PgWakeListener(self.db, self.channel, f"nw-jobs/{runner_id}")

    def wake_workers(self) -> None:
        """``NOTIFY`` the project's channel, unless this thread's last ``create``
        already did (it notifies in its own statement when the job is claimable)."""
        if getattr(self._tls, "notified", False):
            self._tls.notified = False
            return
        self._exec("wake_workers", "SELECT pg_notify(%(chan)s, '')", {"chan": self.channel})

    # ----- raw access ----------------------------------------------------------------------
    def put_record(self, record: Mapping[str, Any]) -> None:
        self._exec("put_record", _PUT_RECORD, self._insert_args(record))

    def delete(self, job_id: str) -> None:
        self._exec("delete", _DELETE, {"id": job_id})

    def purge(self) -> int:
        """Delete every row of this project (tests, benchmarks, retiring a project)."""

        return self._exec("purge", _PURGE, {}, _scalar)

    def get_status(self, job_id: str) -> ComputationResult | None:
        rows = self._read(
            "get_status",
            "SELECT status, value, error, terminal_reason, created_at, completed_at, attempt"
            " FROM nw_jobs.status WHERE project_id = %(p)s AND job_id = %(id)s",
            {"id": job_id},
        )
        if not rows:
            return None
        status, value, error, reason, created, completed, attempt = rows[0]
        return ComputationResult(
            value=value,
            status=ComputationStatus(status),
            error=Exception(error) if error else None,
            created_at=created,
            completed_at=completed,
            metadata={"attempt": attempt},
            terminal_reason=reason,
        )

    def put_status(self, job_id: str, result: ComputationResult) -> None:
        args = {
            "id": job_id,
            "st": ComputationStatus(result.status).value,
            "v": None if result.value is None else _jsonb(result.value),
            "e": None if result.error is None else str(result.error),
            "tr": result.terminal_reason,
            "ca": _aware(result.created_at),
            "co": _aware(result.completed_at),
        }
        self._exec("put_status", _PUT_STATUS, args)


def _aware(when: datetime | None) -> datetime | None:
    if when is None or when.tzinfo is not None:
        return when
    return when.astimezone(UTC)  # a naive datetime means local time


def open_postgres_store(
    url: str, project: Any, *, create: bool, read_only: bool | None = None
) -> PostgresJobStore | None:
    """The project's store in the database at ``url`` (migrated: see the module doc).

    ``create=True`` (write paths) gives the project its id if it has none.
    ``create=False`` creates nothing: None when the project has no id yet (it
    never stored a job). The handle is read-only for ``create=False`` unless
    ``read_only=False`` is asked for (the process's shared handle, which may
    reap and keep the pct floor).
    """
    if create:
        project_id = project.project_id
    else:
        project_id = project.read_meta().get("project_id")
        if not project_id:
            return None
    if read_only is None:
        read_only = not create
    return PostgresJobStore(url, project_id, read_only=read_only)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nw.jobs.stores.postgres migrate [URL]`` (what ``nw-jobs db migrate`` runs)."""
    import os
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "migrate":
        print("usage: python -m nw.jobs.stores.postgres migrate [postgresql://…]", file=sys.stderr)
        return 2
    url = args[1] if len(args) > 1 else os.environ.get("NW_JOBS_DATABASE_URL")
    if not url:
        print("no database URL: pass one or set NW_JOBS_DATABASE_URL", file=sys.stderr)
        return 2
    try:
        applied = migrate(url)
    except JobStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("applied: " + ", ".join(applied) if applied else "up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
