"""The store logic both engines share, written once over a small connector.

A store reads and writes through named queries (``sql/<engine>_queries.sql``:
the same names, each engine's own SQL). Where the rule around a query is the
same on both engines (choosing the page query, decoding progress, runners and
status entries, adding the pruned rollup to spend and counts, the spend
policy's rows) it lives here, as procrastinate's ``manager.py`` sits over its
``connector.py``; an engine supplies only the connector below:

- ``_all(name, args)``: the rows of a named read (mappings by column name);
- ``_run(name, args)``: a named write in a transaction of its own;
- ``_from_json`` / ``_to_json``: the engine's JSON codec (text on SQLite,
  ``jsonb`` on PostgreSQL); ``_to_list``: a list parameter; ``_from_time``: a
  stored timestamp as a datetime;
- ``_has(feature)``: whether the store holds a feature's tables ("rollup",
  "limits", "policy", "parked"): a read-only handle may read an older embedded file;
- ``_parked(name, args)``: the rows of a statement of ``sql/<engine>_parked.sql``;
- ``PAGE_QUERIES``: the statuses' own page query where the engine has one;
- ``ROLLUP_QUERIES``: reads whose pruned share is a query of its own.

What must differ stays in the engine's module: claims, finishes, dedup and
the transactions around them (SKIP LOCKED and group commit on PostgreSQL, the
writer lock on SQLite). ``tests/contract`` runs every rule here on both.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from au import ComputationResult, ComputationStatus

from nw.jobs.core import limits
from nw.jobs.core.records import JobRow
from nw.jobs.core.storable import storable
from nw.jobs.stores.base import JobStore, bound_args, bucketed, utc_day
from nw.jobs.stores.parking import Kept


class SharedStore(JobStore):
    """A ``JobStore`` whose engine-independent rules are written here once."""

    #: The engine has a page query per status (``page_by_state``).
    PAGE_BY_STATE: bool = False
    #: Reads whose pruned share (the rollup) is a separate named query.
    ROLLUP_QUERIES: ClassVar[Mapping[str, str]] = {}

    # ----- the connector an engine supplies --------------------------------------------
    @abstractmethod
    def _all(self, name: str, args: Mapping[str, Any] | None = None) -> Sequence[Mapping[str, Any]]:
        """The rows of the named read."""

    @abstractmethod
    def _run(self, name: str, args: Mapping[str, Any]) -> int:
        """The named write, committed; how many rows it changed."""

    @abstractmethod
    def _row(self, r: Mapping[str, Any]) -> JobRow:
        """A job's row as a ``JobRow``."""

    @abstractmethod
    def _from_json(self, value: Any) -> Any:
        """A stored JSON value (not None) as Python."""

    @abstractmethod
    def _to_json(self, value: Any) -> Any:
        """A Python value as the engine stores JSON."""

    @abstractmethod
    def _to_list(self, values: list[Any]) -> Any:
        """A list parameter as the engine binds one (a JSON array read with
        ``json_each`` on SQLite, an array on PostgreSQL)."""

    @abstractmethod
    def _from_time(self, value: Any) -> datetime:
        """A stored timestamp (not None) as a datetime."""

    @abstractmethod
    def _to_time(self, value: datetime) -> Any:
        """A datetime as the engine stores a timestamp."""

    def _has(self, feature: str) -> bool:
        """Whether this store holds ``feature``'s tables (always, once upgraded)."""
        return True

    def _one(self, name: str, args: Mapping[str, Any] | None = None) -> Mapping[str, Any] | None:
        rows = self._all(name, args)
        return rows[0] if rows else None

    def _with_rollup(self, name: str, args: Mapping[str, Any] | None = None) -> list[dict]:
        """The rows of ``name`` and, where the engine reads the pruned share apart,
        of its rollup query (when the store has the rollup)."""
        rows = [dict(r) for r in self._all(name, args)]
        rollup = self.ROLLUP_QUERIES.get(name)
        if rollup and self._has("rollup"):
            rows += [dict(r) for r in self._all(rollup, args)]
        return rows

    # ----- job reads --------------------------------------------------------------------
    def get(self, job_id: str) -> JobRow | None:
        r = self._one("get", {"job_id": job_id})
        return None if r is None else self._row(r)

    def limits(self, *, now: float) -> list[limits.Limit]:
        if not self._has("limits"):  # an older file, read-only: no limits yet
            return []
        return [
            limits.Limit(
                r["limit_key"],
                r["max_running"],
                r["per_second"],
                int(r["running"]),
                int(r["started_last_s"]),
            )
            for r in self._all("limits", {"now": now})
        ]

    def queue_ahead(self, *, limit: int) -> list[dict[str, Any]]:
        if not self._has("limits"):  # an older file, read-only: no claim order to replay
            return []
        return [dict(r) for r in self._all("queue_ahead", {"limit": int(limit)})]

    def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRow]:
        rows = self._all("get_many", {"job_ids": self._to_list(list(dict.fromkeys(job_ids)))})
        return {r["job_id"]: self._row(r) for r in rows}

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
        if actor_id:
            query = "page_by_actor"
        elif kind:
            query = "page_by_kind"
        elif status and self.PAGE_BY_STATE:
            query = "page_by_state"
        else:
            query = "page"
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
        return [self._row(r) for r in self._all(query, args)]

    def live(self, *, claimable: bool = True) -> list[JobRow]:
        return [self._row(r) for r in self._all("live" if claimable else "live_unclaimable")]

    def iter_ids(self) -> Iterator[str]:
        return iter([r["job_id"] for r in self._all("iter_ids")])

    def progress(self, job_id: str, *, limit: int) -> list[dict[str, Any]]:
        rows = self._all("progress", {"job_id": job_id, "limit": int(limit)})
        return [
            {
                "ts": r["ts"],
                "pct": r["pct"],
                "message": r["message"],
                "stage": None if r["stage"] is None else self._from_json(r["stage"]),
                "attempt": r["attempt"],
            }
            for r in reversed(rows)
        ]

    def get_status(self, job_id: str) -> ComputationResult | None:
        r = self._one("get_status", {"job_id": job_id})
        if r is None:
            return None
        completed = r["completed_at"]
        return ComputationResult(
            value=None if r["value"] is None else self._from_json(r["value"]),
            status=ComputationStatus(r["status"]),
            error=Exception(r["error"]) if r["error"] else None,
            created_at=self._from_time(r["created_at"]),
            completed_at=None if completed is None else self._from_time(completed),
            metadata={"attempt": r["attempt"]},
            terminal_reason=r["terminal_reason"],
        )

    def put_status(self, job_id: str, result: ComputationResult) -> None:
        """Write a job's au status entry (its row's ``au_`` columns); ``KeyError``
        for a job not in the store (its entry is part of its row)."""
        completed = result.completed_at
        args = {
            "job_id": job_id,
            "status": ComputationStatus(result.status).value,
            "value": None if result.value is None else self._to_json(result.value),
            "error": None if result.error is None else str(result.error),
            "terminal_reason": result.terminal_reason,
            "completed_at": None if completed is None else self._to_time(completed),
        }
        if not self._run("put_status", args):
            raise KeyError(f"no job {job_id!r} in this store")

    # ----- runners ----------------------------------------------------------------------
    def _runner(self, r: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **self._from_json(r["info"]),
            "runner_id": r["runner_id"],
            "started_at": r["started_at"],
            "beat_at": r["beat_at"],
        }

    def register_runner(self, runner_id: str, info: Mapping[str, Any], *, now: float) -> None:
        args = {"runner_id": runner_id, "info": self._to_json(dict(info)), "now": now}
        self._run("register_runner", args)

    def unregister_runner(self, runner_id: str) -> None:
        self._run("unregister_runner", {"runner_id": runner_id})

    def runners(self) -> list[dict[str, Any]]:
        return [self._runner(r) for r in self._all("runners")]

    # ----- spend, totals, metrics -------------------------------------------------------
    def spend(self, *, actor_id: str | None = None, since: float | None = None) -> dict[str, Any]:
        if actor_id is None:
            args: dict[str, Any] = {}
            query, rollup = "spend", "rollup_spend"
        else:
            since = since if since is not None else 0.0
            args = {"actor_id": actor_id, "since": since, "since_day": utc_day(since)}
            query, rollup = "spend_by_actor", "rollup_spend_by_actor"
        r = self._one(query, args)
        pruned = self._one(rollup, args) if self._has("rollup") else None
        return _spent(r, pruned)

    def budget_spend(
        self, *, since: float | None, actor_id: str | None, kind: str | None
    ) -> dict[str, Any]:
        day = utc_day(since) if since is not None else None
        args = {"since": since, "since_day": day, "actor_id": actor_id, "kind": kind}
        return _spent(self._one("budget_spend", args), self._one("budget_rollup_spend", args))

    def spend_since(self, *, since: float, today: float) -> list[dict[str, Any]]:
        args = {
            "since": since,
            "today": today,
            "since_day": utc_day(since),
            "today_day": utc_day(today),
        }
        return [
            {
                **r,
                "usd": float(r["usd"] or 0.0),
                "today": bool(r["today"]),
                "lower_bound": bool(r["lower_bound"]),
            }
            for r in self._with_rollup("spend_since", args)
        ]

    def counts(self) -> list[dict[str, Any]]:
        rows = self._with_rollup("counts")
        return [{**r, "grade": r["grade"] or None, "n": int(r["n"])} for r in rows]

    def count_finished_before(self, *, cutoff: float) -> int:
        r = self._one("count_finished_before", {"cutoff": float(cutoff)})
        return 0 if r is None else int(r["n"])

    def durations(self, bounds: Sequence[float]) -> dict[str, dict[str, Any]]:
        rows = self._all("durations", bound_args(bounds))
        return {r["kind"]: bucketed(r, bounds) for r in rows}

    def quoted_and_billed(
        self, *, since: float, kind: str | None, limit: int
    ) -> list[dict[str, Any]]:
        args = {"since": since, "kind": kind, "limit": int(limit)}
        out = []
        for r in self._all("quoted_and_billed", args):
            row = dict(r)
            try:
                row["calls"] = self._from_json(row["calls"]) if row["calls"] else None
            except ValueError:  # a call trail the store cannot read: none shown
                row["calls"] = None
            out.append(row)
        return out

    # ----- spend policy (nw/jobs/api/budgets.py) ------------------------------------------
    def budgets(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._all("budgets")] if self._has("policy") else []

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
        self._run("delete_budget" if usd is None else "set_budget", {**args, "now": now})

    def policy_rows(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._all("policy")] if self._has("policy") else []

    def approval(self) -> dict[str, Any] | None:
        r = self._one("approval") if self._has("policy") else None
        return None if r is None else dict(r)

    def set_approval(self, *, threshold_usd: float | None, mode: str, now: float) -> None:
        self._run("set_approval", {"threshold_usd": threshold_usd, "mode": mode, "now": now})

    # ----- parked jobs (nw/jobs/stores/parking.py; the park, look and put-back are the
    # engine's) ---------------------------------------------------------------------------
    @abstractmethod
    def _parked(
        self, name: str, args: Mapping[str, Any], *, write: bool = True
    ) -> Sequence[Mapping[str, Any]]:
        """The rows of the named statement of ``sql/<engine>_parked.sql``, run in a
        write transaction of its own (or, not ``write``, as a read)."""

    def keep_webhook(self, job_id: str, attempt: int, payload: Any, *, now: float) -> Kept:
        webhook = self._to_json(storable(payload)[0])
        args = {"job_id": job_id, "attempt": attempt, "now": now, "webhook": webhook}
        rows = self._parked("keep_webhook", args)  # nothing: unknown, finished, another attempt
        if not rows:
            return "ignored"
        return "kept" if rows[0]["request_id"] is None else "noted"

    def parked_count(self) -> int:
        if not self._has("parked"):
            return 0
        rows = self._parked("parked_count", {}, write=False)
        return int(rows[0]["n"]) if rows else 0

    def prune_parked(self, *, before: float) -> int:
        return len(self._parked("stale_parked", {"before": before}))


def _spent(r: Mapping[str, Any] | None, pruned: Mapping[str, Any] | None) -> dict[str, Any]:
    """A spend reading: the live jobs' row plus the pruned rollup's (if read)."""
    if r is None:
        raise LookupError("a spend query returned no row")
    pruned_usd = float(pruned["usd"] or 0.0) if pruned else 0.0
    return {
        "actual_usd": float(r["actual_usd"] or 0.0) + pruned_usd,
        "live_estimated_usd": float(r["live_estimated_usd"] or 0.0),
        "live_unknown": int(r["live_unknown"] or 0),
        "lower_bound": bool(r["lower_bound"]) or bool(pruned and pruned["lower_bound"]),
    }
