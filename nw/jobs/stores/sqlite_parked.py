"""The embedded store's parked jobs (``parking.ParkedStore`` over ``sqlite_parked.sql``).

Mixed into ``SqliteJobStore``: every write runs in its write transaction, so
a look's lease is taken under the file's writer lock (two pollers, in any
processes, never take one job).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nw.canonical import stored_json
from nw.jobs.core.storable import storable, storable_fields
from nw.jobs.stores.parking import Kept, Look, Repark, look_of
from nw.jobs.stores.sql import load_queries
from nw.jobs.stores.sqlite_base import SqliteBase

P = load_queries("sqlite_parked.sql")


def _payload(text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


class SqliteParking(SqliteBase):
    """``ParkedStore`` for ``SqliteJobStore`` (uses its cursor, fence, patch and row)."""

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
        with self._cursor(write=True) as c:
            doc = self._fence(c, job_id, attempt, unfinished=True)
            if doc is None:
                return False
            self._patch(c, job_id, fields, doc)
            c.execute(
                P["park"],
                {
                    "job_id": job_id,
                    "kind": kind,
                    "attempt": attempt,
                    "request_id": request_id,
                    "due_at": due_at,
                    "deadline_at": deadline_at,
                    "now": now,
                },
            )
            return True

    def look_parked(
        self, kinds: Sequence[str], *, now: float, look_s: float, limit: int
    ) -> list[Look]:
        if not kinds or limit < 1:
            return []
        args = {"now": now, "kinds": json.dumps(list(kinds)), "limit": int(limit)}
        with self._cursor(write=True) as c:
            rows = c.execute(P["parked_due"], args).fetchall()
            if not rows:
                return []
            ids = json.dumps([r["job_id"] for r in rows])
            c.execute(P["take_look"], {"until": now + look_s, "job_ids": ids})
        return [look_of(r, self._row(r), _payload(r["p_webhook"])) for r in rows]

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

    def unpark(self, job_id: str) -> None:
        with self._cursor(write=True) as c:
            c.execute(P["unpark"], {"job_id": job_id})

    def keep_webhook(self, job_id: str, attempt: int, payload: Any, *, now: float) -> Kept:
        text = stored_json(storable(payload)[0])
        with self._cursor(write=True) as c:
            row = self._get(c, job_id)
            if row is None or row.record.get("finished_at") is not None:
                return "ignored"
            if row.record.get("attempt") != attempt:
                return "ignored"
            args = {
                "job_id": job_id,
                "kind": row.record.get("kind") or "",
                "attempt": attempt,
                "now": now,
                "webhook": text,
            }
            c.execute(P["keep_webhook"], args)
            kept = c.execute("SELECT request_id FROM parked WHERE job_id = ?", (job_id,))
            found = kept.fetchone()
        return "kept" if found is None or found["request_id"] is None else "noted"

    def parked_count(self) -> int:
        with self._cursor() as c:
            if not self._has_parked(c):
                return 0
            return int(c.execute(P["parked_count"]).fetchone()["n"])

    def _has_parked(self, c: Any) -> bool:
        """A file read read-only at an older version has no parked table."""
        found = c.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'parked'"
        ).fetchone()
        return found is not None

    def prune_parked(self, *, before: float) -> int:
        with self._cursor(write=True) as c:
            return int(c.execute(P["stale_parked"], {"before": before}).rowcount)
