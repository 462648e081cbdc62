"""The store contract: the few atomic operations every backend implements.

One ``JobStore`` holds one project's jobs. The facade, the in-process runtime
and the worker only ever call these methods, so the embedded SQLite file and
PostgreSQL are interchangeable; ``tests/contract`` runs one suite against
every backend. Every operation that decides something under concurrency
(dedup, claim, fenced writes, cancel) is abstract: a backend cannot inherit a
racy read-then-write default.

Two views keep the seed's split visible: ``status`` is an au
``ComputationStore`` over the status entries (the single source of truth for
a run's status; the runtime's au backend is built on it) and ``index`` is a
dol mapping over the job records (the membership authority; whole-record
writes and iteration). The hot paths read both in one statement (``JobRow``).

Fencing: ``start``/``claim`` bump a job's ``attempt``; every write a body makes
passes the attempt it was given, and a write whose attempt is no longer
current is refused (returns False), so a reaped-but-alive worker cannot
overwrite a newer attempt or a final state.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from au import ComputationResult, ComputationStore

from nw.jobs.core.records import JobRow
from nw.jobs.core.storable import storable_finish
from nw.jobs.stores.columns import actor_id_of
from nw.jobs.stores.parking import ParkedStore
from nw.jobs.stores.roles import (
    History,
    JobReads,
    Learning,
    Limits,
    Queue,
    Refill,
    Runners,
    Running,
    SpendPolicy,
)

if TYPE_CHECKING:
    from nw.jobs.stores.index_view import IndexView

log = logging.getLogger("nw.jobs")

#: How many bounds the duration histogram's statement takes (``durations``).
DURATION_BOUNDS = 10


class JobStore(
    JobReads, Queue, Running, Runners, Limits, Learning, History, SpendPolicy, ParkedStore, ABC
):
    """One project's jobs, behind atomic operations."""

    read_only: bool = False
    limit_scope: str = "project"
    """Who shares this store's limits: the project's workers, or (PostgreSQL)
    every project in the ``database``."""
    budget_scope: str = "project"
    """Whose spend a stored budget counts: the project's, or (PostgreSQL) every
    project's in the ``database`` (see nw/jobs/api/budgets.py)."""
    refill: Refill | None = None
    """Set by a worker; a store that cannot fold claims into its finishes
    (the embedded store: a claim there is no round trip) ignores it."""

    @abstractmethod
    def put_record(self, record: Mapping[str, Any]) -> None:
        """Upsert a whole record (unfenced; the dol view's ``__setitem__``)."""

    @abstractmethod
    def delete(self, job_id: str) -> None:
        """Remove a job from the index and the status store."""

    @abstractmethod
    def get_status(self, job_id: str) -> ComputationResult | None: ...

    @abstractmethod
    def put_status(self, job_id: str, result: ComputationResult) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    @property
    def status(self) -> StatusView:
        return StatusView(self)

    @property
    def index(self) -> IndexView:
        from nw.jobs.stores.index_view import IndexView  # dol is imported when used

        return IndexView(self)


class StatusView(ComputationStore):
    """The status store as an au ``ComputationStore`` over the backend's table.

    Unlike ``au.FileSystemStore`` a missing key raises ``KeyError`` instead of
    pretending to be PENDING: membership is the index's job, and a made-up
    PENDING is how a finished job once read as queued.
    """

    def __init__(self, store: JobStore):
        super().__init__(ttl_seconds=None)
        self._store = store

    def create_key(self) -> str:
        raise TypeError("job ids come from nw.jobs.core.ids.job_id_for, not the status store")

    def get_reconstruction_info(self) -> dict[str, Any]:
        return {"class": type(self._store).__name__}

    def cleanup_expired(self) -> int:
        return 0

    def __getitem__(self, job_id: str) -> ComputationResult:
        result = self._store.get_status(job_id)
        if result is None:
            raise KeyError(job_id)
        return result

    def __setitem__(self, job_id: str, result: ComputationResult) -> None:
        self._store.put_status(job_id, result)

    def __delitem__(self, job_id: str) -> None:
        self._store.delete(job_id)

    def __iter__(self) -> Iterator[str]:
        return self._store.iter_ids()

    def __len__(self) -> int:
        return sum(1 for _ in self)


def carry_over(old: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a finished run hands to the run that replaces it (see ``create``)."""
    spent = sum(
        float(old.get(k) or 0.0) for k in ("actual_usd", "prior_actual_usd", "earlier_runs_usd")
    )
    attempt = int(old.get("attempt") or 0)
    return {"attempt": attempt, "attempt_base": attempt, "earlier_runs_usd": spent or None}


def due_at(record: Mapping[str, Any]) -> float:
    """When a claimable job may first be claimed (its ``queue_at``): its
    ``not_before`` when later than its creation. The retry backoff's due time
    is the same column, so a delay and a backoff are one mechanism."""
    created = float(record["created_at"])
    later = record.get("not_before")
    if isinstance(later, (int, float)) and not isinstance(later, bool):
        return max(created, float(later))
    return created


def own_run(existing: JobRow, record: Mapping[str, Any], *, retried: bool) -> bool:
    """Whether a live job a create found is the caller's own run: a retried
    create (its connection lost after the commit) finds the run its first try
    wrote, by the run id both carry, and reports it created."""
    run_id = record.get("run_id")
    return retried and run_id is not None and existing.record.get("run_id") == run_id


def check_distinct(records: Sequence[Mapping[str, Any]]) -> None:
    """``create_many`` takes each job id once: the facade dedups a batch first."""
    ids = [r["job_id"] for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError("create_many needs distinct job ids (dedup the batch first)")


def as_stored(
    job_id: str, result: Any, error: str | None, fields: Mapping[str, Any]
) -> tuple[Any, str | None, dict[str, Any]]:
    """A finish's or a requeue's result, error and fields as every store keeps
    them (``storable``: NUL and lone surrogates replaced by U+FFFD, the parts
    named in ``text_replaced``); said in the log when anything was replaced."""
    result, error, kept, parts = storable_finish(result, error, fields)
    if parts:
        log.warning(
            "job %s: NUL or lone surrogates in its %s, which no store keeps: stored as U+FFFD",
            job_id,
            ", ".join(parts),
        )
    return result, error, kept


def rollup_rows(rows: Iterable[JobRow]) -> list[dict[str, Any]]:
    """What pruned jobs carried, folded per UTC day, kind, actor, status and grade
    (what a store adds to its rollup before it deletes them)."""
    from nw.jobs.core.records import outcome_of

    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for row in rows:
        rec = row.record
        day = datetime.fromtimestamp(float(rec["finished_at"]), tz=UTC).date().isoformat()
        grade = outcome_of(row)[2] or ""
        key = (day, str(rec.get("kind")), actor_id_of(rec) or "", row.status.value, grade)
        spent = sum(
            float(v)
            for v in (rec.get(k) for k in ("prior_actual_usd", "earlier_runs_usd", "actual_usd"))
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        )
        lower = rec.get("started_at") is not None and rec.get("actual_is_lower_bound") not in (
            False,
        )
        got = out.setdefault(
            key,
            dict(zip(("day", "kind", "actor_id", "status", "grade"), key, strict=True))
            | {"jobs": 0, "usd": 0.0, "lower_bound": False},
        )
        got["jobs"] += 1
        got["usd"] += spent
        got["lower_bound"] = got["lower_bound"] or lower
    return list(out.values())


def utc_day(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).date().isoformat()


def bound_args(bounds: Sequence[float]) -> dict[str, float]:
    """The ``durations`` statement's parameters ``b0`` .. ``b9``."""
    if len(bounds) != DURATION_BOUNDS:
        raise ValueError(f"durations takes {DURATION_BOUNDS} bounds, got {len(bounds)}")
    return {f"b{i}": float(b) for i, b in enumerate(bounds)}


def bucketed(r: Mapping[str, Any], bounds: Sequence[float]) -> dict[str, Any]:
    """One kind's ``durations`` row as ``{count, seconds, buckets}``."""
    return {
        "count": int(r["n"]),
        "seconds": float(r["seconds"] or 0.0),
        "buckets": {float(b): int(r[f"b{i}"] or 0) for i, b in enumerate(bounds)},
    }
