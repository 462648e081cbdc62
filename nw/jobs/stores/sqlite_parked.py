"""The embedded store's parked jobs (``parking.ParkedStore`` over ``sqlite_parked.sql``).

Mixed into ``SqliteJobStore``: every write runs in its write transaction, so
a look's lease is taken under the file's writer lock (two pollers, in any
processes, never take one job). The webhook, the count and the prune are the
shared store's (``shared.py``, over ``_parked``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nw.canonical import stored_json
from nw.jobs.core.storable import storable_fields
from nw.jobs.stores.parking import Look, Park, Repark, look_of
from nw.jobs.stores.sql import load_queries
from nw.jobs.stores.sqlite_base import SqliteBase

P = load_queries("sqlite_parked.sql")


class SqliteParking(SqliteBase):
    """``ParkedStore`` for ``SqliteJobStore`` (uses its cursor, fence, patch and row)."""

    def park(self, p: Park, *, now: float) -> bool:
        fields, _ = storable_fields(p.fields)
        with self._cursor(write=True) as c:
            doc = self._fence(c, p.job_id, p.attempt, unfinished=True)
            if doc is None:
                return False
            self._patch(c, p.job_id, fields, doc)
            c.execute(
                P["park"],
                {
                    "job_id": p.job_id,
                    "kind": p.kind,
                    "attempt": p.attempt,
                    "request_id": p.request_id,
                    "due_at": p.due_at,
                    "deadline_at": p.deadline_at,
                    "now": now,
                },
            )
            return True

    def look_parked(
        self, kinds: Sequence[str], *, now: float, look_s: float, limit: int
    ) -> list[Look]:
        if not kinds or limit < 1:
            return []
        args = {"now": now, "until": now + look_s, "kinds": json.dumps(list(kinds))}
        with self._cursor(write=True) as c:
            taken = c.execute(P["look"], {**args, "limit": int(limit)}).fetchall()
            rows = self.get_many([t["job_id"] for t in taken]) if taken else {}
        return [
            look_of(
                t,
                rows[t["job_id"]],
                None if t["p_webhook"] is None else self._from_json(t["p_webhook"]),
            )
            for t in sorted(taken, key=lambda t: t["due_at"])
            if t["job_id"] in rows
        ]

    def repark(self, items: Sequence[Repark], *, now: float) -> None:
        if not items:
            return
        args = [
            {
                "job_id": i.job_id,
                "attempt": i.attempt,
                "due_at": i.due_at,
                "seen": i.seen,
                "now": now,
            }
            for i in items
        ]
        shown = [
            {"job_id": i.job_id, "attempt": i.attempt, "parked": stored_json(i.parked)}
            for i in items
            if i.parked is not None
        ]
        with self._cursor(write=True) as c:
            c.executemany(P["repark"], args)
            if shown:
                c.executemany(P["repark_shown"], shown)

    def _parked(
        self, name: str, args: Mapping[str, Any], *, write: bool = True
    ) -> Sequence[Mapping[str, Any]]:
        with self._cursor(write=write) as c:
            return c.execute(P[name], args).fetchall()
