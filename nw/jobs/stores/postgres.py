"""The PostgreSQL store: many API replicas and workers on many hosts, one database.

Same contract and semantics as the embedded SQLite store (``tests/contract``
runs one suite against both). Tables, in schema ``nw_jobs`` (see
``pg_migrations/``): ``jobs`` (the index, one row per job, its au status
entry in its ``au_`` columns: the au ``ComputationStore``), ``durations``,
``progress``, ``runners``, ``limits``, ``spend_rollup``.

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
  new run carrying ``attempt`` and spend over), from the locked row.
* claims: ``SELECT … FOR UPDATE SKIP LOCKED`` over the small partial index of
  due queued jobs, ``limit`` jobs per statement, moved to running in the same
  statement; a ``lease`` token lets a claim whose reply was lost with the
  connection recover exactly the jobs it took instead of orphaning them.
* fencing: every fenced write is ``UPDATE … WHERE attempt = %s``.
* one row per job: a transition writes the job's one ``jobs`` row (its
  au status entry included), so no two rows of a job are locked in turn; a
  deadlock or serialization failure is retried anyway.
* waking: ``create`` of a claimable job sends ``NOTIFY nw_jobs_<project>`` in
  the same statement (delivered at commit); workers ``LISTEN`` on it.

The statements are in ``sql/postgres_queries.sql``, by name; rows are read by
column name. The plumbing is beside this module: ``pg_database`` (the retry
loop, and the one place psycopg errors become ``JobStoreError``),
``pg_pool``, ``pg_schema`` (migrations), ``pg_listen`` (LISTEN),
``pg_secrets`` (passwords kept out of errors and logs).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import psycopg
from au import ComputationResult, ComputationStatus
from psycopg.types.json import Jsonb

from nw.canonical import stored_json
from nw.jobs.core import limits
from nw.jobs.core.errors import JobStoreError, JobStoreUnreachable
from nw.jobs.core.records import JobRow
from nw.jobs.core.storable import storable, storable_fields
from nw.jobs.stores.base import (
    COLUMNS,
    JobStore,
    Refill,
    actor_id_of,
    as_stored,
    bound_args,
    bucketed,
    carry_over,
    check_distinct,
    due_at,
    is_field_name,
    rollup_rows,
    settled_error,
    split_record,
    utc_day,
)
from nw.jobs.stores.group_commit import GroupCommit
from nw.jobs.stores.pg_database import Conn, Database, RetryNow, one, one_row
from nw.jobs.stores.pg_listen import PgWakeListener
from nw.jobs.stores.pg_pool import close_pools as _close_pools
from nw.jobs.stores.pg_schema import check_schema, forget_checks, migrate
from nw.jobs.stores.sql import load_queries

__all__ = ["PostgresJobStore", "close_pools", "migrate", "open_postgres_store"]

Q = load_queries("postgres_queries.sql")
_BEAT_THEN_CLAIM = f"{Q['beat_runner']}\n;\n{Q['claim']}"
"""``claim_and_beat``'s message: two statements, one transaction (simple protocol)."""
log = logging.getLogger("nw.jobs")
#: Finishes go out in up to two statements at once (group commit lanes): while
#: one batch is in flight, a crowd of at least ``FINISH_CROWD`` finishes that
#: ended meanwhile goes out beside it rather than waiting for its commit; fewer
#: wait and join the next batch. One lane left a worker's slots idle while its
#: statement was in flight (the database and the worker each below 60% of a
#: core); a second lane for any lone finish made batches of 1-2 jobs, each
#: paying a statement's fixed cost. Measured in alternating no-op drains
#: (misc/bench/PERFORMANCE.md).
FINISH_LANES, FINISH_CROWD = 2, 4

_LIVE = ("queued", "running", "cancelling")


def close_pools() -> None:
    """Close this process's pools and forget which databases were checked."""
    _close_pools()
    forget_checks()


def _dumps(value: Any) -> str:
    return stored_json(value)


def _jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=_dumps)


def channel_for(project_id: str, prefix: str = "nw_jobs_") -> str:
    """The NOTIFY channel of a project (a valid identifier, <= 63 bytes): its
    wake-up channel (a claimable job was queued), or with ``prefix`` another."""
    if re.fullmatch(r"[A-Za-z0-9_]{1,48}", project_id):
        return f"{prefix}{project_id.lower()}"
    return prefix + hashlib.sha256(project_id.encode()).hexdigest()[:40]


#: The prefix of a project's change channel: NOTIFYed when a job ends or a
#: cancel is asked (what ``jobs.wait`` and ``jobs.watch`` wake on).
CHANGES_PREFIX = "nw_chg_"


class PostgresJobStore(JobStore):
    """One project's jobs in a PostgreSQL database (see the module docstring)."""

    limit_scope = "database"  # the limits table is not per project

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
        self.changes_channel = channel_for(project_id, CHANGES_PREFIX)
        self._tls = threading.local()
        self._lost_leases: set[str] = set()
        """Leases of claims that raised, maybe committed (``lost_claims``)."""
        self._lost_lock = threading.Lock()
        self._finishes = GroupCommit(
            self._finish_many,
            key=lambda item: item["job_id"],
            lanes=FINISH_LANES,
            crowd=FINISH_CROWD,
        )
        check_schema(self.db)

    def __repr__(self) -> str:
        return f"PostgresJobStore({self.db.display!r}, project_id={self.project_id!r})"

    # ----- running a named query -----------------------------------------------------
    def _params(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"project_id": self.project_id, "changes_channel": self.changes_channel, **args}

    def _read(self, what: str, args: Mapping[str, Any], query: str | None = None) -> list[dict]:
        """The rows of the named query ``what`` (or of ``query``)."""
        sql, params = Q[query or what], self._params(args)
        conn = getattr(self._tls, "conn", None)
        if conn is not None:  # inside this thread's admitted create: same transaction
            return conn.execute(sql, params).fetchall()
        return self.db.run(lambda c, _r: one(c, sql, params).fetchall(), what=what)

    def _write(self, what: str, fn: Callable[[Conn, bool], Any]) -> Any:
        if self.read_only:
            raise JobStoreError("this job store was opened read-only")
        return self.db.run(fn, what=what)

    def _exec(
        self, what: str, args: Mapping[str, Any], get: Callable[[Any], Any] | None = None
    ) -> Any:
        """The named write statement ``what``; ``get(cursor)`` reads its result
        before the connection goes back to the pool."""
        sql, params = Q[what], self._params(args)

        def op(conn: Conn, _retried: bool) -> Any:
            cur = one(conn, sql, params)
            return None if get is None else get(cur)

        return self._write(what, op)

    def close(self) -> None:
        """Nothing to release per store: the pool is per URL (``close_pools``)."""

    # ----- decoding ------------------------------------------------------------------
    @staticmethod
    def _row(r: Mapping[str, Any]) -> JobRow:
        record = dict(r["doc"]) if isinstance(r["doc"], dict) else {}
        for name in COLUMNS:
            record[name] = r[name]
        return JobRow(record, r["status"], r["value"], r["error"])

    @staticmethod
    def _patch_fields(fields: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(column fields, doc fields) of a patch, with the mirrored columns."""
        cols: dict[str, Any] = {}
        doc: dict[str, Any] = {}
        for name, value in fields.items():
            if not is_field_name(name):
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

    def _patch_args(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        cols, doc = self._patch_fields(fields)
        return {"cols": _jsonb(cols), "doc": _jsonb(doc)}

    def _record_args(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters of a whole record (``create``, ``replace``, ``put_record``)."""
        cols, doc = split_record(record)
        key = record.get("idempotency_key")
        return {
            **cols,
            "idempotency_key": key if isinstance(key, str) else None,
            "actor_id": actor_id_of(record),
            "doc": _jsonb(doc),
            "channel": self.channel,
            "limit_key": record.get("limit_key"),
            "priority": int(record.get("priority") or 0),
        }

    # ----- reads ---------------------------------------------------------------------
    def get(self, job_id: str) -> JobRow | None:
        rows = self._read("get", {"job_id": job_id})
        return self._row(rows[0]) if rows else None

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
        # The index to walk: the actor's, the kind's, the status's, else newest first.
        query = (
            "page_by_actor"
            if actor_id
            else "page_by_kind"
            if kind
            else "page_by_state"
            if status
            else "page"
        )
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
        return [self._row(r) for r in self._read("page", args, query)]

    def live(self, *, claimable: bool = True) -> list[JobRow]:
        query = "live" if claimable else "live_unclaimable"
        return [self._row(r) for r in self._read(query, {})]

    def change_mark(self) -> tuple[Any, ...]:
        return tuple(self._read("change_mark", {})[0].values())

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        # The statements that end a job or ask for a cancel NOTIFY this channel.
        from nw.jobs.stores import pg_changes

        return pg_changes.subscribe(self.db.url, self.changes_channel, callback)

    def iter_ids(self) -> Iterator[str]:
        return iter([r["job_id"] for r in self._read("iter_ids", {})])

    # ----- transitions ---------------------------------------------------------------
    def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRow]:
        rows = self._read("get_many", {"job_ids": list(job_ids)})
        return {r["job_id"]: self._row(r) for r in rows}

    def create(
        self,
        record: dict[str, Any],
        *,
        claimable: bool,
        admit: Callable[[], None] | None = None,
    ) -> tuple[JobRow, bool]:
        """See ``JobStore.create``. A claimable job wakes idle workers by the
        ``NOTIFY`` in its own statement (delivered at commit)."""
        if admit is not None:
            return self._create_admitted(record, claimable=claimable, admit=admit)
        params = self._params(self._record_args(record))
        params["queue_at"] = due_at(record) if claimable else None
        run_id = record.get("run_id")

        def op(conn: Conn, retried: bool) -> tuple[JobRow, bool]:
            if one_row(one(conn, Q["create"], params))["inserted"]:
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

        return self._write("create", op)

    def _lock(self, conn: Conn, params: Mapping[str, Any]) -> tuple[JobRow, bool] | None:
        """Lock the job's ``jobs`` row (inside the caller's transaction): its row
        and whether it is live, or None when there is no such job."""
        r = conn.execute(Q["lock"], params).fetchone()
        if r is None:
            return None
        return self._row(r), r["state"] in _LIVE

    def _replace(
        self,
        conn: Conn,
        params: Mapping[str, Any],
        record: Mapping[str, Any],
        old: JobRow,
    ) -> tuple[JobRow, bool]:
        """Replace the locked finished job by a new run (it carries ``attempt``
        and spend over, see ``carry_over``)."""
        new = {**record, **carry_over(old.record)}
        conn.execute(Q["replace"], {**params, **self._record_args(new)})
        return JobRow(dict(new), "pending"), True

    def _create_admitted(
        self, record: dict[str, Any], *, claimable: bool, admit: Callable[[], None]
    ) -> tuple[JobRow, bool]:
        """``create`` with the budget gate inside: creates of the project are
        serialised by a transaction-scoped advisory lock on the project, and
        ``admit`` reads through this same transaction (see ``_read``)."""
        params = self._params(self._record_args(record))
        params["queue_at"] = due_at(record) if claimable else None
        run_id = record.get("run_id")

        def op(conn: Conn, retried: bool) -> tuple[JobRow, bool]:
            with conn.transaction():
                conn.execute(Q["lock_project_creates"], params)
                got = self._lock(conn, params)
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
                    if not one_row(conn.execute(Q["create"], params))["inserted"]:
                        # a create without the gate got in first: decide again
                        raise RetryNow("the job appeared during create")
                    return JobRow(dict(record), "pending"), True
                return self._replace(conn, params, record, got[0])

        return self._write("create", op)

    def create_many(
        self,
        records: Sequence[dict[str, Any]],
        *,
        claimable: Sequence[bool],
        admit: Callable[[list[int]], None] | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> list[tuple[JobRow, bool]]:
        """See ``JobStore.create_many``. One transaction: lock the batch's
        existing rows, decide each as ``create`` does, run ``admit`` over the
        rest, insert the new ones in one statement (and replace finished ones);
        a row that appeared meanwhile (another batch, a lone create) makes the
        whole transaction run again."""
        check_distinct(records)
        if not records:
            return []
        order = sorted(range(len(records)), key=lambda k: records[k]["job_id"])
        base = self._params({"job_ids": [records[k]["job_id"] for k in order]})

        def op(conn: Conn, retried: bool) -> list[tuple[JobRow, bool]]:
            out: list[Any] = [None] * len(records)
            with conn.transaction():
                if admit is not None:  # serialised with every admitted create of the project
                    conn.execute(Q["lock_project_creates"], base)
                found = {}
                for r in conn.execute(Q["lock_many"], base).fetchall():
                    found[r["job_id"]] = (self._row(r), r["state"] in _LIVE)
                new: list[int] = []
                replace: list[int] = []
                for k in order:
                    got = found.get(records[k]["job_id"])
                    if got is not None and got[1]:
                        # A retry whose first try committed finds its own run: created.
                        run_id = records[k].get("run_id")
                        mine = (
                            retried and run_id is not None and got[0].record.get("run_id") == run_id
                        )
                        out[k] = (got[0], mine)
                    else:
                        (new if got is None else replace).append(k)
                if admit is not None:
                    self._tls.conn = conn
                    try:
                        admit(sorted(new + replace))  # raises: rolled back, nothing written
                    finally:
                        self._tls.conn = None
                if new:
                    batch = [self._batch_row(records[k], claimable[k], k) for k in new]
                    args = {**base, "batch": _jsonb(batch), "channel": self.channel}
                    if one_row(conn.execute(Q["create_many"], args))["inserted"] != len(new):
                        raise RetryNow("a job of the batch appeared during create_many")
                    for k in new:
                        out[k] = (JobRow(dict(records[k]), "pending"), True)
                for k in replace:
                    params = self._params(self._record_args(records[k]))
                    params["queue_at"] = due_at(records[k]) if claimable[k] else None
                    out[k] = self._replace(conn, params, records[k], found[records[k]["job_id"]][0])
                if also is not None:
                    also(conn)  # the batch's links (pipelines), in the same transaction
            return out

        return self._write("create_many", op)

    @staticmethod
    def _batch_row(record: Mapping[str, Any], claimable: bool, n: int) -> dict[str, Any]:
        """A new record as a row of ``create_many``'s batch (not started, not
        cancelled); ``n``, its place in the batch, orders its actor's turns."""
        cols, doc = split_record(record)
        key = record.get("idempotency_key")
        return {
            "job_id": cols["job_id"],
            "created_at": cols["created_at"],
            "kind": cols["kind"],
            "idempotency_key": key if isinstance(key, str) else None,
            "actor_id": actor_id_of(record),
            "attempt": cols["attempt"],
            "runner_id": cols["runner_id"],
            "doc": doc,
            "queue_at": due_at(record) if claimable else None,
            "limit_key": record.get("limit_key"),
            "priority": int(record.get("priority") or 0),
            "n": n,
        }

    def start(self, job_id: str, *, now: float, runner_id: str) -> JobRow | limits.NotYet | None:
        params = self._params(
            {"job_id": job_id, "now": now, "runner_id": runner_id, "lease": uuid.uuid4().hex}
        )

        def op(conn: Conn, retried: bool) -> JobRow | limits.NotYet | None:
            if retried:  # the first try may have committed before the connection died
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:
                    return self._row(got[0])
            r = one(conn, Q["start"], {**params, "limited_ok": False}).fetchone()
            if r is not None:  # the common case: one statement
                return self._row(r)
            info = one(conn, Q["job_limit"], params).fetchone()
            if info is None or not info["startable"]:
                return None
            not_before = info["not_before"]
            if isinstance(not_before, (int, float)) and not_before > now:
                return limits.NotYet(float(not_before), limits.delay_text(not_before - now))
            if not info["limited"]:  # its limit was removed meanwhile: ask again
                return limits.NotYet(now, "")
            with conn.transaction():  # a limited key: as _claim_limited, for one job
                key = info["limit_key"]
                conn.execute(Q["lock_limits"], {"keys": [key]})
                free = self._rooms(conn, [key], now).get(key)
                if free is not None and free <= 0:
                    return limits.NotYet(now + 0.2, f"waiting: {key}")
                r = conn.execute(Q["start"], {**params, "limited_ok": True}).fetchone()
                if r is not None:
                    self._note_starts(conn, [key], now)
            return None if r is None else self._row(r)

        return self._write("start", op)

    def claim(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> list[JobRow]:
        """See ``JobStore.claim``. Jobs without a limited key start in the one
        ``claim`` statement; those with one come back held and are started by
        ``_claim_limited`` under their keys' row locks. A key found full is
        skipped in a next round (at most three), so its backlog holds no one up."""
        if not kinds or limit < 1:
            return []
        params = self._params(
            {
                "kinds": list(kinds),
                "now": now,
                "runner_id": runner_id,
                "lease": uuid.uuid4().hex,
            }
        )

        def op(conn: Conn, retried: bool) -> list[JobRow]:
            if retried:
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:
                    return [self._row(r) for r in got]
            return self._claim_rounds(conn, params, int(limit))

        with self._losing(params["lease"]):
            return self._write("claim", op)

    def claim_and_beat(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> tuple[list[JobRow], list[dict[str, Any]] | None]:
        """See ``JobStore.claim_and_beat``: ``beat_runner`` and the claim's first
        round as one message of the simple query protocol (the parameters bound
        on the client): one round trip, one transaction that the server
        commits whatever the client does next; the rounds after it, if any, as
        ``claim``'s. Not prepared: a claim carries the beat at most twice a
        beat interval."""
        if not kinds or limit < 1:
            return [], None
        params = self._params(
            {"kinds": list(kinds), "now": now, "runner_id": runner_id, "lease": uuid.uuid4().hex}
        )
        first = {**params, "limit": int(limit), "skip_keys": []}

        def op(conn: Conn, retried: bool) -> tuple[list[JobRow], list | None]:
            if retried:  # the first try may have committed: its claims are ours by lease
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:
                    return [self._row(r) for r in got], None
            cur = psycopg.ClientCursor(conn)
            cur.execute(_BEAT_THEN_CLAIM, first)
            runners = cur.fetchall()
            cur.nextset()
            rows = cur.fetchall()
            return self._claim_rounds(conn, params, int(limit), first=rows), runners

        with self._losing(params["lease"]):
            rows, runners = self._write("claim", op)
        return rows, None if runners is None else self._beaten(runners, runner_id, now)

    @contextlib.contextmanager
    def _losing(self, lease: str) -> Iterator[None]:
        """A claim under ``lease`` that raises may have committed (its answer
        lost past the retries, or a later round failing after the first):
        its lease is kept for ``lost_claims``."""
        try:
            yield
        except JobStoreError:
            with self._lost_lock:
                self._lost_leases.add(lease)
            raise

    def lost_claims(self) -> list[JobRow]:
        """See ``JobStore.lost_claims``: the unfinished rows under each kept
        lease; a lease is let go once nothing under it is unfinished (put
        back, which clears the lease, or never committed)."""
        with self._lost_lock:
            leases = list(self._lost_leases)
        rows = []
        for lease in leases:  # rare: one statement per lost claim
            taken = [self._row(r) for r in self._read("by_lease", {"lease": lease})]
            unfinished = [row for row in taken if row.record.get("finished_at") is None]
            if not unfinished:
                with self._lost_lock:
                    self._lost_leases.discard(lease)
            rows += unfinished
        return rows

    def _claim_rounds(
        self,
        conn: Conn,
        params: Mapping[str, Any],
        limit: int,
        first: list[Any] | None = None,
    ) -> list[JobRow]:
        """``claim``'s rounds: each claim statement starts the jobs of keys
        without a limit and returns the others held for ``_claim_limited``; a
        round that finds keys full is followed by one that passes over them.
        ``first``: the rows of a first round already run (a folded refill's)."""
        out: list[JobRow] = []
        skip: list[str] = []
        for _round in range(3):
            want = limit - len(out)
            if want <= 0:
                break
            if first is not None:
                rows, first = first, None
            else:
                args = {**params, "limit": want, "skip_keys": skip}
                rows = one(conn, Q["claim"], args).fetchall()
            out += [self._row(r) for r in rows if not r["held"]]
            held = [(r["job_id"], r["limit_key"]) for r in rows if r["held"]]
            if not held:
                break
            started, full = self._claim_limited(conn, params, held)
            out += started
            if not full or len(started) == len(held):
                break
            skip += full
        return out

    def _rooms(self, conn: Conn, keys: list[str], now: float) -> dict:
        rows = conn.execute(Q["limit_rooms"], {"keys": keys, "now": now}).fetchall()
        return {r["limit_key"]: limits.room(r["running_room"], r["rate_room"]) for r in rows}

    def _note_starts(self, conn: Conn, keys: list[str], now: float) -> None:
        counts: dict[str, int] = {}
        for key in keys:
            counts[key] = counts.get(key, 0) + 1
        args = {"keys": list(counts), "counts": list(counts.values()), "now": now}
        conn.execute(Q["note_starts"], args)

    def _claim_limited(
        self,
        conn: Conn,
        params: Mapping[str, Any],
        held: list[tuple[str, str]],
    ) -> tuple[list[JobRow], list[str]]:
        """Start what the limits allow of these held jobs, in one transaction:
        lock the keys' limit rows (key order), count each key's room in a new
        statement (its snapshot sees every start committed before the lock was
        granted), start the admitted jobs, log their starts. Returns the rows
        started and the keys found full."""
        now = params["now"]
        keys = sorted({key for _, key in held})
        with conn.transaction():
            conn.execute(Q["lock_limits"], {"keys": keys})
            admitted, full = limits.admit(held, self._rooms(conn, keys, now))
            if not admitted:
                return [], full
            rows = conn.execute(Q["start_ids"], {**params, "job_ids": admitted}).fetchall()
            self._note_starts(conn, [r["limit_key"] for r in rows], now)
        return [self._row(r) for r in rows], full

    # ----- limits --------------------------------------------------------------------
    def set_limit(
        self, key: str, *, max_running: int | None, per_second: int | None, now: float
    ) -> None:
        if max_running is None and per_second is None:
            self._exec("delete_limit", {"key": key})
        else:
            args = {"key": key, "max_running": max_running, "per_second": per_second, "now": now}
            self._exec("set_limit", args)

    def limits(self, *, now: float) -> list[limits.Limit]:
        return [
            limits.Limit(
                r["limit_key"],
                r["max_running"],
                r["per_second"],
                int(r["running"]),
                int(r["started_last_s"]),
            )
            for r in self._read("limits", {"now": now})
        ]

    def queue_ahead(self, *, limit: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._read("queue_ahead", {"limit": int(limit)})]

    def patch(self, job_id: str, fields: Mapping[str, Any], *, attempt: int | None) -> bool:
        fields, _ = storable_fields(fields)
        args = {"job_id": job_id, "attempt": attempt, **self._patch_args(fields)}
        return self._exec("patch", args, lambda cur: cur.rowcount) > 0

    def finish(self, job_id: str, **finish: Any) -> bool:
        return self._finishes.wait(self.finish_soon(job_id, **finish))

    def finish_soon(self, job_id: str, **finish: Any) -> Future:
        """See ``JobStore.finish_soon``: the finish joins the group commit (a
        finish refused before, alone, is a settled future)."""
        try:
            item = self._finish_item(job_id, **finish)
        except Exception as exc:
            return settled_error(exc)
        return self._finishes.submit_soon(item)

    def _finish_item(
        self,
        job_id: str,
        *,
        au_status: ComputationStatus,
        result: Any,
        error: str | None,
        fields: Mapping[str, Any],
        attempt: int | None,
    ) -> dict[str, Any]:
        """A finish as the group commit batches it; refused alone (read-only, not JSON)."""
        if self.read_only:
            raise JobStoreError("this job store was opened read-only")
        result, error, fields = as_stored(job_id, result, error, fields)
        cols, doc = self._patch_fields(fields)
        _dumps(result)  # not JSON: refuse this call alone, before it joins a batch
        return {
            "job_id": job_id,
            "attempt": attempt,
            "au_status": ComputationStatus(au_status).value,
            "value": result,
            "error": error,
            "cols": cols,
            "doc": doc,
        }

    def _finish_many(self, items: list[dict[str, Any]]) -> list[Any]:
        """One statement for a batch of finishes (``_finish_alone``). With a
        worker's ``refill`` the batch also claims the jobs that take the
        finished ones' slots, in the same statement (``finish_many_and_claim``),
        and hands them over once it committed, before the finishes' futures
        resolve (so before their slots are let go); if that statement fails,
        the finishes are written alone first, then the claim is answered as not
        made."""
        refill = self.refill
        want = refill.want([item["job_id"] for item in items]) if refill is not None else 0
        if refill is None or want <= 0:
            return self._finish_alone(items)
        rows = None  # the claim's answer: None, the claim was not made
        try:
            done, rows = self._finish_and_claim(items, refill, want)
            return [item["job_id"] in done for item in items]
        except JobStoreUnreachable:
            raise
        except JobStoreError as exc:
            log.warning("finishing and claiming in one statement failed (%s); finishing", exc)
            return self._finish_alone(items)
        finally:
            refill.take(rows, want)

    def _finish_alone(self, items: list[dict[str, Any]]) -> list[Any]:
        """``finish_many``; on a database error other than an unreachable
        database, each item again alone (so one bad item fails alone)."""
        try:
            done = self._exec(
                "finish_many",
                {"batch": _jsonb(items), "job_ids": [item["job_id"] for item in items]},
                lambda cur: {r["job_id"] for r in cur.fetchall()},
            )
            return [item["job_id"] in done for item in items]
        except JobStoreUnreachable:
            raise
        except JobStoreError:
            if len(items) == 1:
                raise
        out: list[Any] = []
        for item in items:
            try:
                out.extend(self._finish_alone([item]))
            except JobStoreError as exc:
                out.append(exc)
        return out

    def _finish_and_claim(
        self, items: list[dict[str, Any]], refill: Refill, want: int
    ) -> tuple[set[str], list[JobRow]]:
        """``finish_many_and_claim``: the finishes commit with the claims of
        unlimited keys or not at all; the held jobs of limited keys are then
        started by ``_claim_limited`` after that commit, and keys found full
        passed over in further rounds, as ``claim`` does (``_claim_rounds``)."""
        finish = self._params(
            {"batch": _jsonb(items), "job_ids": [item["job_id"] for item in items]}
        )
        claim: dict[str, Any] = {
            "kinds": list(refill.kinds()),
            "now": refill.clock(),
            "runner_id": refill.runner_id,
            "limit": int(want),
            "lease": uuid.uuid4().hex,
        }
        params = {**finish, **claim}

        def op(conn: Conn, retried: bool) -> tuple[set[str], list[JobRow]]:
            if retried:  # the first try may have committed: its claims are ours by lease
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:  # and its finishes committed with them: writing them again is a no-op
                    rows = one(conn, Q["finish_many"], finish).fetchall()
                    return {r["job_id"] for r in rows}, [self._row(r) for r in got]
            rows = one(conn, Q["finish_many_and_claim"], params).fetchall()
            done = set(rows[0]["finished"]) if rows else set()
            picked = [r for r in rows if r["job_id"] is not None]
            # the finishes are committed: the held keys' counts see them
            return done, self._claim_rounds(conn, params, int(want), first=picked)

        with self._losing(claim["lease"]):
            return self._write("finish_many_and_claim", op)

    def requeue(
        self, job_id: str, *, fields: Mapping[str, Any], not_before: float, attempt: int | None
    ) -> bool:
        _, _, fields = as_stored(job_id, None, None, fields)
        fields = {**fields, "started_at": None, "heartbeat_at": None}
        args = {
            "job_id": job_id,
            "attempt": attempt,
            "not_before": not_before,
            **self._patch_args(fields),
        }
        return self._exec("requeue", args, lambda cur: cur.fetchone()["requeued"]) > 0

    def request_cancel(self, job_id: str, *, now: float) -> JobRow | None:
        why = {"error": "cancelled before start", "error_kind": "cancelled"}
        params = self._params({"job_id": job_id, "now": now, "doc": _jsonb(why)})

        def op(conn: Conn, _retried: bool) -> JobRow | None:
            # Two statements, each committed as it runs: a process frozen between
            # them holds no lock (one explicit transaction would, until it thawed).
            one(conn, Q["request_cancel"], params)
            r = one(conn, Q["get"], params).fetchone()
            return None if r is None else self._row(r)

        return self._write("request_cancel", op)

    def beat(self, job_ids: Iterable[str], *, now: float, runner_id: str) -> set[str]:
        args = {"job_ids": list(job_ids), "now": now, "runner_id": runner_id}
        return self._exec("beat", args, lambda cur: {r["job_id"] for r in cur.fetchall()})

    # ----- learning, progress, runners -----------------------------------------------
    def samples(self, keys: Sequence[str], *, window: int) -> dict[str, list[float]]:
        if not keys:
            return {}
        rows = self._read("samples", {"keys": list(keys), "window": int(window)})
        got = {r["key"]: list(reversed(r["seconds"])) for r in rows}
        return {k: got.get(k, []) for k in keys}

    def add_samples(self, samples: Mapping[str, float], *, now: float, window: int) -> None:
        if not samples:
            return
        keys = list(samples)
        params = self._params(
            {
                "keys": keys,
                "seconds": [float(samples[k]) for k in keys],
                "now": now,
                "window": int(window),
            }
        )

        def op(conn: Conn, retried: bool) -> None:
            if not retried:
                one(conn, Q["add_samples"], params)
                return
            with conn.transaction():
                conn.execute(Q["add_samples_retry"], params)
                conn.execute(Q["prune_samples"], params)

        self._write("add_samples", op)

    def append_progress(self, job_id: str, beat: Mapping[str, Any], *, attempt: int | None) -> bool:
        beat, _ = storable(dict(beat))
        stage = beat.get("stage")
        params = self._params(
            {
                "job_id": job_id,
                "attempt": attempt,
                "ts": beat["ts"],
                "pct": beat.get("pct"),
                "message": beat.get("message"),
                "stage": None if stage is None else _jsonb(stage),
            }
        )

        def op(conn: Conn, retried: bool) -> bool:
            if retried:
                return one_row(one(conn, Q["append_progress_retry"], params))["appended"] > 0
            return one(conn, Q["append_progress"], params).rowcount > 0

        return self._write("append_progress", op)

    def progress(self, job_id: str, *, limit: int) -> list[dict[str, Any]]:
        rows = self._read("progress", {"job_id": job_id, "limit": int(limit)})
        return [
            {
                "ts": r["ts"],
                "pct": r["pct"],
                "message": r["message"],
                "stage": r["stage"],
                "attempt": r["attempt"],
            }
            for r in reversed(rows)
        ]

    def register_runner(self, runner_id: str, info: Mapping[str, Any], *, now: float) -> None:
        args = {"runner_id": runner_id, "info": _jsonb(dict(info)), "now": now}
        self._exec("register_runner", args)

    def unregister_runner(self, runner_id: str) -> None:
        self._exec("unregister_runner", {"runner_id": runner_id})

    def runners(self) -> list[dict[str, Any]]:
        return [_runner(r) for r in self._read("runners", {})]

    def beat_runner(self, runner_id: str, *, now: float) -> list[dict[str, Any]]:
        args = {"runner_id": runner_id, "now": now}
        rows = self._exec("beat_runner", args, lambda cur: cur.fetchall())
        return self._beaten(rows, runner_id, now)

    @staticmethod
    def _beaten(rows: list[Mapping[str, Any]], runner_id: str, now: float) -> list[dict[str, Any]]:
        """``beat_runner``'s rows: it reads the runners as they were before its
        own update, so the beating runner's row is stamped here (as the update
        wrote it: never back)."""
        return [
            {
                **_runner(r),
                **({"beat_at": _later(r["beat_at"], now)} if r["runner_id"] == runner_id else {}),
            }
            for r in rows
        ]

    def spend(self, *, actor_id: str | None = None, since: float | None = None) -> dict[str, Any]:
        if actor_id is None:
            r = self._read("spend", {})[0]
            pruned = self._read("rollup_spend", {})[0]
        else:
            since = since if since is not None else 0.0
            args = {"actor_id": actor_id, "since": since, "since_day": utc_day(since)}
            r = self._read("spend_by_actor", args)[0]
            pruned = self._read("rollup_spend_by_actor", args)[0]
        return {
            "actual_usd": float(r["actual_usd"]) + float(pruned["usd"]),
            "live_estimated_usd": float(r["live_estimated_usd"]),
            "live_unknown": int(r["live_unknown"]),
            "lower_bound": bool(r["lower_bound"]) or bool(pruned["lower_bound"]),
        }

    # ----- history: prune, totals, metrics -------------------------------------------
    def prune(self, *, cutoff: float, batch: int = 500) -> int:
        deleted = 0
        while True:

            def op(conn: Conn, _retried: bool) -> int:
                with conn.transaction():  # rollup and deletes of one batch together
                    found = conn.execute(
                        Q["finished_before"],
                        self._params({"cutoff": float(cutoff), "limit": int(batch)}),
                    ).fetchall()
                    if not found:
                        return 0
                    rows = [self._row(r) for r in found]
                    args = {
                        "rollup": _jsonb(rollup_rows(rows)),
                        "job_ids": [row.record["job_id"] for row in rows],
                    }
                    conn.execute(Q["prune_rows"], self._params(args))
                    return len(rows)

            done = self._write("prune", op)
            deleted += done
            if done < batch:
                return deleted

    def count_finished_before(self, *, cutoff: float) -> int:
        return int(self._read("count_finished_before", {"cutoff": float(cutoff)})[0]["n"])

    def spend_since(self, *, since: float, today: float) -> list[dict[str, Any]]:
        args = {
            "since": since,
            "today": today,
            "since_day": utc_day(since),
            "today_day": utc_day(today),
        }
        return [
            {**r, "usd": float(r["usd"] or 0.0), "lower_bound": bool(r["lower_bound"])}
            for r in self._read("spend_since", args)
        ]

    def counts(self) -> list[dict[str, Any]]:
        return [{**r, "n": int(r["n"])} for r in self._read("counts", {})]

    def durations(self, bounds: Sequence[float]) -> dict[str, dict[str, Any]]:
        rows = self._read("durations", bound_args(bounds))
        return {r["kind"]: bucketed(r, bounds) for r in rows}

    # ----- waking idle workers -------------------------------------------------------
    def wake_listener(self, runner_id: str) -> PgWakeListener:
        """``LISTEN`` on this project's channel (one dedicated connection); a
        worker serving more projects adds theirs with ``listener.also(store)``."""
        return PgWakeListener(self.db, self.channel, f"nw-jobs/{runner_id}")

    def wake_workers(self) -> None:
        """``NOTIFY`` the project's channel (``create`` of a claimable job
        already does, in its own statement)."""
        self._exec("notify", {"channel": self.channel})

    # ----- raw access behind the views -----------------------------------------------
    def put_record(self, record: Mapping[str, Any]) -> None:
        self._exec("put_record", self._record_args(record))

    def delete(self, job_id: str) -> None:
        self._exec("delete", {"job_id": job_id})

    def purge(self) -> int:
        """Delete every row of this project (tests, benchmarks, retiring a project)."""
        return self._exec("purge", {}, lambda cur: cur.fetchone()["jobs"])

    def get_status(self, job_id: str) -> ComputationResult | None:
        rows = self._read("get_status", {"job_id": job_id})
        if not rows:
            return None
        r = rows[0]
        return ComputationResult(
            value=r["value"],
            status=ComputationStatus(r["status"]),
            error=Exception(r["error"]) if r["error"] else None,
            created_at=r["created_at"],
            completed_at=r["completed_at"],
            metadata={"attempt": r["attempt"]},
            terminal_reason=r["terminal_reason"],
        )

    def put_status(self, job_id: str, result: ComputationResult) -> None:
        """Write a job's au status entry (its row's ``au_`` columns); ``KeyError``
        for a job not in the store (its entry is part of its row)."""
        args = {
            "job_id": job_id,
            "status": ComputationStatus(result.status).value,
            "value": None if result.value is None else _jsonb(result.value),
            "error": None if result.error is None else str(result.error),
            "terminal_reason": result.terminal_reason,
            "completed_at": _aware(result.completed_at),
        }
        if not self._exec("put_status", args, lambda cur: cur.rowcount):
            raise KeyError(f"no job {job_id!r} in this store")

    # ----- spend policy (nw/jobs/api/budgets.py) -----------------------------------------
    budget_scope = "database"  # the budgets count every project of the database

    def budgets(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._read("budgets", {})]

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
        self._exec("delete_budget" if usd is None else "set_budget", {**args, "now": now})

    def policy_rows(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._read("policy", {})]

    def approval(self) -> dict[str, Any] | None:
        rows = self._read("approval", {})
        return dict(rows[0]) if rows else None

    def set_approval(self, *, threshold_usd: float | None, mode: str, now: float) -> None:
        self._exec("set_approval", {"threshold_usd": threshold_usd, "mode": mode, "now": now})

    def hold_budgets(self, keys: Sequence[str]) -> None:
        """Lock these budgets' rows for the rest of the admitted create (see ``lock_budgets``)."""
        if keys:
            self._read("lock_budgets", {"keys": sorted(keys)})

    def budget_spend(
        self, *, since: float | None, actor_id: str | None, kind: str | None
    ) -> dict[str, Any]:
        day = utc_day(since) if since is not None else None
        args = {"since": since, "since_day": day, "actor_id": actor_id, "kind": kind}
        r = self._read("budget_spend", args)[0]
        pruned = self._read("budget_rollup_spend", args)[0]
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
        return [dict(r) for r in self._read("quoted_and_billed", args)]


def _aware(when: datetime | None) -> datetime | None:
    if when is None or when.tzinfo is not None:
        return when
    return when.astimezone(UTC)  # a naive datetime means local time


def _runner(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **r["info"],
        "runner_id": r["runner_id"],
        "started_at": r["started_at"],
        "beat_at": r["beat_at"],
    }


def _later(beat_at: float | None, now: float) -> float:
    """A beat at ``now`` of a runner last seen at ``beat_at``: never back."""
    return now if beat_at is None else max(beat_at, now)


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
