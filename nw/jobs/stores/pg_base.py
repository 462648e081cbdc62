"""The PostgreSQL store's base: its connection to the database, the named
queries, the row codec (``PgBase``), and the module's constants. The store
is this base and two parts beside it, ``pg_claims`` (starts, claims,
limits) and ``pg_finishes`` (fenced writes, finishes in group commits,
requeues, cancels), joined in ``postgres.PostgresJobStore``."""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb

from nw.canonical import stored_json
from nw.jobs.core.errors import JobStoreError
from nw.jobs.core.records import JobRow
from nw.jobs.stores.columns import COLUMNS, patch_values, row_values
from nw.jobs.stores.group_commit import GroupCommit
from nw.jobs.stores.pg_database import Conn, Database, one
from nw.jobs.stores.pg_pool import close_pools as _close_pools
from nw.jobs.stores.pg_schema import check_schema, forget_checks
from nw.jobs.stores.shared import SharedStore
from nw.jobs.stores.sql import load_queries

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


def _later(beat_at: float | None, now: float) -> float:
    """A beat at ``now`` of a runner last seen at ``beat_at``: never back."""
    return now if beat_at is None else max(beat_at, now)


class PgBase(SharedStore):
    """One project's jobs in a PostgreSQL database: the connection and codec
    every part of the store uses (see ``postgres.py``)."""

    limit_scope = "database"  # the limits table is not per project
    budget_scope = "database"  # the budgets count every project of the database
    PAGE_BY_STATE = True

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

    def _all(self, name: str, args: Mapping[str, Any] | None = None) -> Sequence[Mapping[str, Any]]:
        return self._read(name, args or {})

    def _run(self, name: str, args: Mapping[str, Any]) -> int:
        return int(self._exec(name, args, lambda cur: cur.rowcount))

    def _from_json(self, value: Any) -> Any:
        return value  # jsonb arrives decoded

    def _to_json(self, value: Any) -> Any:
        return _jsonb(value)

    def _to_list(self, values: list[Any]) -> Any:
        return values

    def _from_time(self, value: Any) -> datetime:
        return value  # timestamptz arrives as a datetime

    def _to_time(self, value: datetime) -> Any:
        return value if value.tzinfo is not None else value.astimezone(UTC)  # naive: local

    def _row(self, r: Mapping[str, Any]) -> JobRow:
        record = dict(r["doc"]) if isinstance(r["doc"], dict) else {}
        for name in COLUMNS:
            record[name] = r[name]
        return JobRow(record, r["status"], r["value"], r["error"])

    def _patch_args(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        cols, doc = patch_values(fields)
        return {"cols": _jsonb(cols), "doc": _jsonb(doc)}

    def _record_args(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters of a whole record (``create``, ``replace``, ``put_record``)."""
        cols, doc = row_values(record)
        return {**cols, "doc": _jsonb(doc), "channel": self.channel}

    def _beaten(
        self, rows: list[Mapping[str, Any]], runner_id: str, now: float
    ) -> list[dict[str, Any]]:
        """``beat_runner``'s rows: it reads the runners as they were before its
        own update, so the beating runner's row is stamped here (as the update
        wrote it: never back)."""
        return [
            {
                **self._runner(r),
                **({"beat_at": _later(r["beat_at"], now)} if r["runner_id"] == runner_id else {}),
            }
            for r in rows
        ]

    @abstractmethod
    def _finish_many(self, items: list[dict[str, Any]]) -> list[Any]:
        """A batch of finishes in one statement (``pg_finishes``)."""
