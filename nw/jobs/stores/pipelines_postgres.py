"""Pipelines in the PostgreSQL store (tables and trigger of migration 0008).

The links of new jobs are written by ``create_many``'s ``also``, in its
transaction: the upstreams are locked ``FOR SHARE`` first, so an upstream
that ends meanwhile waits for the commit and its trigger then sees the new
edges (no release is missed). Each waiting job's count of upstreams not ended
is kept in ``job_waits``: the trigger of every upstream's end takes that row's
lock to count down, so of two upstreams ending at once exactly one sees 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from nw.canonical import stored_json
from nw.jobs.core.errors import JobStoreError
from nw.jobs.core.pipelines import start_of, stopped_by
from nw.jobs.core.status import CANCELLED_BEFORE_START
from nw.jobs.stores.pg_database import Conn, one
from nw.jobs.stores.pipelines import Links, PipelineStore
from nw.jobs.stores.sql import load_queries

if TYPE_CHECKING:
    from nw.jobs.stores.postgres import PostgresJobStore

Q = load_queries("postgres_pipelines.sql")


def _jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=stored_json)


class PostgresPipelines(PipelineStore):
    def __init__(self, store: PostgresJobStore):
        self.store = store

    def _args(self, **args: Any) -> dict[str, Any]:
        return {"project_id": self.store.project_id, **args}

    def _read(self, what: str, **args: Any) -> list[dict[str, Any]]:
        sql, params = Q[what], self._args(**args)
        return self.store.db.run(lambda c, _r: one(c, sql, params).fetchall(), what=what)

    def linker(self, links: Links) -> Callable[[Any], None]:
        if self.store.read_only:
            raise JobStoreError("this job store was opened read-only")

        def write(conn: Conn) -> None:
            links.released.clear()  # a retried transaction starts again
            if links.pipeline is not None:
                p = links.pipeline
                conn.execute(
                    Q["put_pipeline"],
                    self._args(
                        pipeline_id=p["pipeline_id"],
                        created_at=p["created_at"],
                        label=p.get("label"),
                        actor_id=p.get("actor_id"),
                        doc=_jsonb(p["doc"]),
                    ),
                )
            if links.steps:
                steps = [{"step": s, "job_id": j} for s, j in links.steps]
                pid = links.pipeline["pipeline_id"] if links.pipeline else None
                conn.execute(Q["put_steps"], self._args(pipeline_id=pid, steps=_jsonb(steps)))
            if not links.waiting:
                if links.edges:
                    edges = [e.as_row() for e in links.edges]
                    conn.execute(Q["put_edges"], self._args(edges=_jsonb(edges)))
                return
            ups = sorted({e.upstream_id for e in links.edges})
            states = {
                r["job_id"]: (r["state"], r["step"])
                for r in conn.execute(Q["upstream_states"], self._args(job_ids=ups)).fetchall()
            }
            conn.execute(
                Q["put_edges"], self._args(edges=_jsonb([e.as_row() for e in links.edges]))
            )
            start = start_of(links.waiting, links.edges, states)
            waits = [{"job_id": j, "unmet": n} for j, n in start.unmet.items()]
            conn.execute(Q["put_waits"], self._args(waits=_jsonb(waits)))
            if start.released:
                conn.execute(Q["release_ids"], self._args(job_ids=start.released, now=links.now))
                links.released.extend(start.released)
            if start.doomed:
                why = {
                    job: {
                        "error": stopped_by(via, state),
                        "error_kind": "cancelled",
                        "stopped_by": via,
                    }
                    for job, (via, state) in start.doomed.items()
                }
                conn.execute(
                    Q["cancel_doomed"],
                    self._args(job_ids=list(why), why=_jsonb(why), now=links.now),
                )  # the trigger stops what waits on them in turn

        return write

    def pipeline(self, pipeline_id: str) -> dict[str, Any] | None:
        rows = self._read("pipeline", pipeline_id=pipeline_id)
        return dict(rows[0]) if rows else None

    def steps(self, pipeline_id: str) -> list[tuple[str, str]]:
        return [(r["step"], r["job_id"]) for r in self._read("steps", pipeline_id=pipeline_id)]

    def cancel(self, pipeline_id: str, *, now: float) -> list[str]:
        # postgres_queries.sql: its update is `request_cancel`'s (one fragment)
        args = {"pipeline_id": pipeline_id, "now": now, "doc": _jsonb(CANCELLED_BEFORE_START)}
        row = self.store._exec("cancel_steps", args, lambda cur: cur.fetchone())
        return [] if row is None else list(row["cancelled"])
