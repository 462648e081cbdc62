"""Pipelines in the embedded store (tables of schema version 7).

``settle`` runs in the write transaction that ends a job (``finish``, and
``request_cancel`` of a queued job): the dependents whose upstreams have now
all ended well become claimable, and when the job failed or was cancelled the
waiting jobs below it (through edges without ``allow_failure``, at any depth)
are cancelled, saying which upstream step stopped them. A bounded number of
statements whatever the fan-out: one read of whether it has dependents, one
of how it ended and one release statement (and, on a failure, one recursive
read and one update). The file has one
writer at a time, so a dependent's upstreams are read rather than counted."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nw.canonical import stored_json
from nw.jobs.core.pipelines import start_of, stopped_by
from nw.jobs.core.status import CANCELLED_BEFORE_START
from nw.jobs.stores.pipelines import Links, PipelineStore
from nw.jobs.stores.sql import load_queries

if TYPE_CHECKING:
    from nw.jobs.stores.sqlite import SqliteJobStore

Q = load_queries("sqlite_pipelines.sql")


def settle(c: sqlite3.Connection, job_id: str, now: float) -> int:
    """Release or cancel the dependents of a job that may have just ended (in
    the caller's write transaction); how many became claimable (the caller
    wakes workers after its commit when any did). Idempotent: a job written
    again changes nothing more."""
    if c.execute(Q["has_dependents"], {"job_id": job_id}).fetchone() is None:
        return 0
    r = c.execute(Q["ended"], {"job_id": job_id}).fetchone()
    if r is None or not r["finished"]:
        return 0
    ended = [job_id]
    if not r["ok"]:
        ended += cancel_below(c, job_id, r["step"] or job_id, r["status"], now)
    return len(c.execute(Q["release"], {"ids": json.dumps(ended), "now": now}).fetchall())


def cancel_below(c: sqlite3.Connection, job_id: str, via: str, state: str, now: float) -> list[str]:
    """Cancel every waiting job below ``job_id`` (``doomed``); their ids."""
    ids = [r["job_id"] for r in c.execute(Q["doomed"], {"job_id": job_id})]
    if ids:
        _cancel(c, ids, stopped_by(via, state), via, now)
    return ids


def _cancel(c: sqlite3.Connection, ids: Sequence[str], why: str, via: str, now: float) -> None:
    args = {
        "ids": json.dumps(list(ids)),
        "now": now,
        "why": stored_json({"error": why, "error_kind": "cancelled", "stopped_by": via}),
    }
    c.execute(Q["cancel_waiting"], args)


class SqlitePipelines(PipelineStore):
    def __init__(self, store: SqliteJobStore):
        self.store = store

    def linker(self, links: Links) -> Callable[[Any], None]:
        def write(c: sqlite3.Connection) -> None:
            if links.pipeline is not None:
                p = links.pipeline
                c.execute(
                    Q["put_pipeline"],
                    {
                        "pipeline_id": p["pipeline_id"],
                        "created_at": p["created_at"],
                        "label": p.get("label"),
                        "actor_id": p.get("actor_id"),
                        "doc": stored_json(p["doc"]),
                    },
                )
            if links.steps:
                steps = [{"step": s, "job_id": j} for s, j in links.steps]
                pid = links.pipeline["pipeline_id"] if links.pipeline else None
                c.execute(Q["put_steps"], {"pipeline_id": pid, "steps": json.dumps(steps)})
            if links.edges:
                rows = [e.as_row() | {"allow_failure": int(e.allow_failure)} for e in links.edges]
                c.execute(Q["put_edges"], {"edges": json.dumps(rows)})
            if not links.waiting:
                return
            ups = sorted({e.upstream_id for e in links.edges})
            states = {
                r["job_id"]: (r["state"], r["step"])
                for r in c.execute(Q["upstream_states"], {"job_ids": json.dumps(ups)})
            }
            start = start_of(links.waiting, links.edges, states)
            if start.released:
                ids = json.dumps(start.released)
                c.execute(Q["release_ids"], {"ids": ids, "now": links.now}).fetchall()
                links.released.extend(start.released)
            for job, (via, state) in start.doomed.items():
                _cancel(c, [job], stopped_by(via, state), via, links.now)
                settle(c, job, links.now)

        return write

    def pipeline(self, pipeline_id: str) -> dict[str, Any] | None:
        if not self.store._has("pipelines"):  # an older file, read-only: none
            return None
        with self.store.cursor() as c:
            r = c.execute(Q["pipeline"], {"pipeline_id": pipeline_id}).fetchone()
        if r is None:
            return None
        return {**dict(r), "doc": json.loads(r["doc"])}

    def steps(self, pipeline_id: str) -> list[tuple[str, str]]:
        with self.store.cursor() as c:
            rows = c.execute(Q["steps"], {"pipeline_id": pipeline_id}).fetchall()
        return [(r["step"], r["job_id"]) for r in rows]

    def cancel(self, pipeline_id: str, *, now: float) -> list[str]:
        why = stored_json(CANCELLED_BEFORE_START)
        args = {"pipeline_id": pipeline_id, "now": now, "why": why}
        released = 0
        with self.store.cursor(write=True) as c:
            rows = c.execute(Q["cancel_steps"], args).fetchall()
            if not rows:
                return []
            ended = json.dumps([r[0] for r in rows if r[1] is not None])
            for r in c.execute(Q["settle_outside"], {"ids": ended}).fetchall():
                released += settle(c, r[0], now)
        if released:
            self.store.wake_workers()
        return [r[0] for r in rows]
