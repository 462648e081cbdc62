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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nw.jobs.core.errors import JobStoreError
from nw.jobs.core.records import JobRow
from nw.jobs.core.storable import storable
from nw.jobs.stores.base import (
    carry_over,
    check_distinct,
    due_at,
    own_run,
    rollup_rows,
)
from nw.jobs.stores.pg_base import (
    _LIVE,
    CHANGES_PREFIX,
    Q,
    _jsonb,
    channel_for,
    close_pools,
)
from nw.jobs.stores.pg_batch import batch_rows
from nw.jobs.stores.pg_database import Conn, RetryNow, one, one_row
from nw.jobs.stores.pg_finishes import PgFinishes
from nw.jobs.stores.pg_listen import PgWakeListener
from nw.jobs.stores.pg_parked import PgParking
from nw.jobs.stores.pg_schema import migrate

__all__ = [
    "CHANGES_PREFIX",
    "PostgresJobStore",
    "channel_for",
    "close_pools",
    "migrate",
    "open_postgres_store",
]


class PostgresJobStore(PgParking, PgFinishes):
    """One project's jobs in a PostgreSQL database (see the module docstring)."""

    def change_mark(self) -> tuple[Any, ...]:
        return tuple(self._read("change_mark", {})[0].values())

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        # The statements that end a job or ask for a cancel NOTIFY this channel.
        from nw.jobs.stores import pg_changes

        return pg_changes.subscribe(self.db.url, self.changes_channel, callback)

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
                    return existing, own_run(existing, record, retried=retried)
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

        def op(conn: Conn, retried: bool) -> tuple[JobRow, bool]:
            with conn.transaction():
                conn.execute(Q["lock_project_creates"], params)
                got = self._lock(conn, params)
                if got is not None and got[1]:
                    existing = got[0]
                    return existing, own_run(existing, record, retried=retried)
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
        """See ``JobStore.create_many``. One transaction. Without ``admit``, the
        batch is inserted first, in one statement; only the jobs it skipped
        (their id exists) are then locked and decided as ``create`` decides
        (live: returned; finished: replaced). With ``admit``, the batch's
        existing rows are locked first, ``admit`` runs over the rest, then the
        new ones are inserted in one statement. A row that vanished, or
        appeared after ``admit`` saw it absent, runs the whole transaction
        again."""
        check_distinct(records)
        if not records:
            return []
        order = sorted(range(len(records)), key=lambda k: records[k]["job_id"])
        base = self._params({})

        def op(conn: Conn, retried: bool) -> list[tuple[JobRow, bool]]:
            out: list[Any] = [None] * len(records)
            found: dict[str, tuple[JobRow, bool]] = {}
            replace: list[int] = []
            with conn.transaction():
                if admit is None:
                    new = order
                    skipped = self._insert_batch(conn, records, claimable, new)
                    if skipped:
                        new = [k for k in order if records[k]["job_id"] not in skipped]
                        have = [k for k in order if records[k]["job_id"] in skipped]
                        found = self._lock_batch(conn, base, records, have)
                        if len(found) != len(have):  # deleted meanwhile: from the top
                            raise RetryNow("a job of the batch vanished during create_many")
                        replace = self._decide(found, records, have, out, retried)
                else:  # serialised with every admitted create of the project
                    conn.execute(Q["lock_project_creates"], base)
                    found = self._lock_batch(conn, base, records, order)
                    rest = [k for k in order if records[k]["job_id"] not in found]
                    replace = self._decide(found, records, order, out, retried)
                    self._tls.conn = conn
                    try:
                        admit(sorted(rest + replace))  # raises: rolled back, nothing written
                    finally:
                        self._tls.conn = None
                    new = rest
                    if new and self._insert_batch(conn, records, claimable, new):
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

    def _insert_batch(
        self,
        conn: Conn,
        records: Sequence[Mapping[str, Any]],
        claimable: Sequence[bool],
        ks: Sequence[int],
    ) -> set[str]:
        """Insert ``records[k]`` for each k of ``ks`` (one statement); the job
        ids it skipped because they exist."""
        batch, shared = batch_rows(records, claimable, ks)
        args = self._params({"batch": _jsonb(batch), "shared": _jsonb(shared)})
        args["channel"] = self.channel
        return set(one_row(conn.execute(Q["create_many"], args))["skipped"] or ())

    def _lock_batch(
        self,
        conn: Conn,
        base: Mapping[str, Any],
        records: Sequence[Mapping[str, Any]],
        ks: Sequence[int],
    ) -> dict[str, tuple[JobRow, bool]]:
        """The existing rows of ``records[k]`` (k in ``ks``), locked in job id
        order: by job id, each with whether it is live."""
        ids = {"job_ids": [records[k]["job_id"] for k in ks]}
        rows = conn.execute(Q["lock_many"], {**base, **ids}).fetchall()
        return {r["job_id"]: (self._row(r), r["state"] in _LIVE) for r in rows}

    @staticmethod
    def _decide(
        found: Mapping[str, tuple[JobRow, bool]],
        records: Sequence[Mapping[str, Any]],
        ks: Sequence[int],
        out: list[Any],
        retried: bool,
    ) -> list[int]:
        """Each ``records[k]`` whose job exists, decided as ``create`` does: a
        live one fills ``out[k]``; the finished ones are returned, to replace."""
        replace: list[int] = []
        for k in ks:
            got = found.get(records[k]["job_id"])
            if got is None:
                continue
            if got[1]:
                # A retry whose first try committed finds its own run: created.
                out[k] = (got[0], own_run(got[0], records[k], retried=retried))
            else:
                replace.append(k)
        return replace

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

    def beat_runner(self, runner_id: str, *, now: float) -> list[dict[str, Any]]:
        args = {"runner_id": runner_id, "now": now}
        rows = self._exec("beat_runner", args, lambda cur: cur.fetchall())
        return self._beaten(rows, runner_id, now)

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

    def wake_listener(self, runner_id: str) -> PgWakeListener:
        """``LISTEN`` on this project's channel (one dedicated connection); a
        worker serving more projects adds theirs with ``listener.also(store)``."""
        return PgWakeListener(self.db, self.channel, f"nw-jobs/{runner_id}")

    def wake_workers(self) -> None:
        """``NOTIFY`` the project's channel (``create`` of a claimable job
        already does, in its own statement)."""
        self._exec("notify", {"channel": self.channel})

    def put_record(self, record: Mapping[str, Any]) -> None:
        self._exec("put_record", self._record_args(record))

    def delete(self, job_id: str) -> None:
        self._exec("delete", {"job_id": job_id})

    def purge(self) -> int:
        """Delete every row of this project (tests, benchmarks, retiring a project)."""
        return self._exec("purge", {}, lambda cur: cur.fetchone()["jobs"])

    def hold_budgets(self, keys: Sequence[str]) -> None:
        """Lock these budgets' rows for the rest of the admitted create (see ``lock_budgets``)."""
        if keys:
            self._read("lock_budgets", {"keys": sorted(keys)})


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
