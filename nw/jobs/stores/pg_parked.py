"""PostgreSQL's parked jobs (``parking.ParkedStore`` over ``postgres_parked.sql``).

Mixed into ``PostgresJobStore``. A look takes its jobs ``FOR UPDATE SKIP
LOCKED`` and leases them in the same statement, so pollers on many hosts
share the parked jobs without taking one twice; a park is fenced by the
attempt in its own statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from nw.jobs.core.storable import storable, storable_fields
from nw.jobs.stores.parking import Kept, Look, Repark, look_of
from nw.jobs.stores.pg_base import PgBase
from nw.jobs.stores.pg_database import Conn, one
from nw.jobs.stores.sql import load_queries

P = load_queries("postgres_parked.sql")


class PgParking(PgBase):
    """``ParkedStore`` for ``PostgresJobStore`` (uses its params, reads, writes and rows)."""

    def _parked_run(self, what: str, args: Mapping[str, Any]) -> list[dict]:
        sql, params = P[what], self._params(args)

        def op(conn: Conn, _retried: bool) -> list[dict]:
            cur = one(conn, sql, params)
            return cur.fetchall() if cur.description is not None else []

        return self._write(what, op)

    def park(
        self,
        job_id: str,
        *,
        attempt: int,
        kind: str,
        request_id: str,
        due_at: float,
        deadline_at: float | None,
        fields: Mapping[str, Any],
        now: float,
    ) -> bool:
        fields, _ = storable_fields(fields)
        args = {
            "job_id": job_id,
            "attempt": attempt,
            "kind": kind,
            "request_id": request_id,
            "due_at": due_at,
            "deadline_at": deadline_at,
            "now": now,
            "doc": Jsonb(dict(fields)),
        }
        return bool(self._parked_run("park", args))

    def look_parked(
        self, kinds: Sequence[str], *, now: float, look_s: float, limit: int
    ) -> list[Look]:
        if not kinds or limit < 1:
            return []
        args = {"now": now, "until": now + look_s, "kinds": list(kinds), "limit": int(limit)}
        rows = self._parked_run("look", args)
        return [look_of(r, self._row(r), r["p_webhook"]) for r in rows]

    def repark(self, items: Sequence[Repark], *, now: float) -> None:
        if not items:
            return
        sql = P["repark"]
        batch = [
            self._params(
                {
                    "job_id": i.job_id,
                    "attempt": i.attempt,
                    "due_at": i.due_at,
                    "seen": None if i.seen is None else Jsonb(i.seen),
                    "now": now,
                }
            )
            for i in items
        ]

        shown = [
            self._params(
                {"job_id": i.job_id, "attempt": i.attempt, "parked": Jsonb(dict(i.parked))}
            )
            for i in items
            if i.parked is not None
        ]

        def op(conn: Conn, _retried: bool) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(sql, batch)
                if shown:
                    cur.executemany(P["repark_shown"], shown)

        self._write("repark", op)

    def unpark(self, job_id: str) -> None:
        self._parked_run("unpark", {"job_id": job_id})

    def keep_webhook(self, job_id: str, attempt: int, payload: Any, *, now: float) -> Kept:
        args = {
            "job_id": job_id,
            "attempt": attempt,
            "now": now,
            "webhook": Jsonb(storable(payload)[0]),
        }
        rows = self._parked_run("keep_webhook", args)
        if not rows:
            return "ignored"
        return "kept" if rows[0]["request_id"] is None else "noted"

    def parked_count(self) -> int:
        sql, params = P["parked_count"], self._params({})
        db = self.db
        rows = db.run(lambda c, _r: one(c, sql, params).fetchall(), what="parked_count")
        return int(rows[0]["n"]) if rows else 0

    def prune_parked(self, *, before: float) -> int:
        sql, params = P["stale_parked"], self._params({"before": before})

        def op(conn: Conn, _retried: bool) -> int:
            return int(one(conn, sql, params).rowcount)

        return int(self._write("stale_parked", op))
