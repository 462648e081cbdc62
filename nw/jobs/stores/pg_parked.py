"""PostgreSQL's parked jobs (``parking.ParkedStore`` over ``postgres_parked.sql``).

Mixed into ``PostgresJobStore``. A look takes its jobs ``FOR UPDATE SKIP
LOCKED`` and leases them in the same statement, so pollers on many hosts
share the parked jobs without taking one twice; a park is fenced by the
attempt in its own statement. The webhook, the count and the prune are the
shared store's (``shared.py``, over ``_parked``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from nw.jobs.core.storable import storable_fields
from nw.jobs.stores.parking import Look, Park, Repark, look_of
from nw.jobs.stores.pg_base import PgBase
from nw.jobs.stores.pg_database import Conn, one
from nw.jobs.stores.sql import load_queries

P = load_queries("postgres_parked.sql")


class PgParking(PgBase):
    """``ParkedStore`` for ``PostgresJobStore`` (uses its params, reads, writes and rows)."""

    def _parked(
        self, name: str, args: Mapping[str, Any], *, write: bool = True
    ) -> Sequence[Mapping[str, Any]]:
        sql, params = P[name], self._params(args)

        def op(conn: Conn, _retried: bool) -> list[dict]:
            cur = one(conn, sql, params)
            return cur.fetchall() if cur.description is not None else []

        return self._write(name, op) if write else self.db.run(op, what=name)

    def park(self, p: Park, *, now: float) -> bool:
        fields, _ = storable_fields(p.fields)
        args = {
            "job_id": p.job_id,
            "attempt": p.attempt,
            "kind": p.kind,
            "request_id": p.request_id,
            "due_at": p.due_at,
            "deadline_at": p.deadline_at,
            "now": now,
            "doc": Jsonb(dict(fields)),
        }
        return bool(self._parked("park", args))

    def look_parked(
        self, kinds: Sequence[str], *, now: float, look_s: float, limit: int
    ) -> list[Look]:
        if not kinds or limit < 1:
            return []
        args = {"now": now, "until": now + look_s, "kinds": list(kinds), "limit": int(limit)}
        rows = self._parked("look", args)
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
