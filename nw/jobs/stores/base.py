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

import functools
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from au import ComputationResult, ComputationStatus, ComputationStore

from nw.jobs.core.limits import Limit, NotYet
from nw.jobs.core.records import JobRow
from nw.jobs.core.storable import storable_finish

if TYPE_CHECKING:
    from nw.jobs.stores.index_view import IndexView

log = logging.getLogger("nw.jobs")

#: How many bounds the duration histogram's statement takes (``durations``).
DURATION_BOUNDS = 10

#: Record fields every backend keeps as real columns (filtered, ordered, fenced).
COLUMNS = (
    "job_id",
    "created_at",
    "kind",
    "attempt",
    "cancel_requested",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "runner_id",
)

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=1024)
def is_field_name(name: Hashable) -> bool:
    """A record field name a store accepts in a patch: an identifier (a doc
    key and a column name alike). Cached: every finish checks each of its
    fields' names."""
    return isinstance(name, str) and _FIELD_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Refill:
    """A worker's standing request to a store's finishes: when a batch of
    finishes is written, claim up to ``want(job ids)`` more jobs of
    ``kinds()`` for ``runner_id`` in the same transaction and hand them to
    ``take(rows, asked)`` (called on the thread that wrote the batch once
    that transaction committed, never before, and before the finishes are
    answered: a result is durable before its slot runs anything else).
    ``want`` returning 0 asks for nothing (an idle queue, a stopping worker);
    every ``want`` that returned n > 0 is answered by exactly one
    ``take(rows, n)``, with ``rows=None`` if the claim was not made (the
    statement failed, and the finishes were written alone first), so the
    worker can count the slots of a claim in flight as taken."""

    kinds: Callable[[], Sequence[str]]
    runner_id: str
    want: Callable[[Sequence[str]], int]
    take: Callable[[list[JobRow] | None, int], None]
    clock: Callable[[], float]


class JobStore(ABC):
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

    # ----- membership and reads -------------------------------------------------
    @abstractmethod
    def get(self, job_id: str) -> JobRow | None:
        """The job's record and status entry, or None if it is not in the index."""

    def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRow]:
        """The rows of these jobs (those in the index), by job id: a pipeline's
        steps, a fan-in's upstreams. A backend reads them in one query."""
        out = {}
        for job_id in dict.fromkeys(job_ids):
            row = self.get(job_id)
            if row is not None:
                out[job_id] = row
        return out

    @abstractmethod
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
        """Newest first (ties by id); ``status`` is the normalized job status,
        ``grade`` the outcome grade (both as ``records.to_job`` reads them),
        ``q`` a case-insensitive substring of the label; ``before`` is the
        cursor ``(created_at, job_id)`` of the job a previous page ended at:
        only older jobs follow. Every filter walks an index."""

    @abstractmethod
    def live(self, *, claimable: bool = True) -> list[JobRow]:
        """Every job that is not finished (queued, running, cancelling);
        ``claimable=False`` leaves out the jobs queued for a worker's claim."""

    @abstractmethod
    def iter_ids(self) -> Iterator[str]:
        """Job ids, newest first."""

    def change_mark(self) -> Hashable | None:
        """A cheap value that moves whenever a job, its status or its trail is
        written (by this handle or any other): a watcher reads the jobs only when
        it moved. None: this store cannot tell (read every time)."""
        return None

    @abstractmethod
    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (on another thread: keep it quick) when a job of
        this store may have changed, by any process: at least whenever a job
        ends or a cancel is asked. Returns the call that stops it. Once this
        returns, no such change is missed (``jobs.wait`` reads its job after
        subscribing, then sleeps until called)."""

    # ----- the atomic transitions -----------------------------------------------
    @abstractmethod
    def create(
        self,
        record: dict[str, Any],
        *,
        claimable: bool,
        admit: Callable[[], None] | None = None,
    ) -> tuple[JobRow, bool]:
        """Put-if-absent: a new queued job (au PENDING) and True; an existing live
        job with that id and False; an existing finished job is replaced by the
        new run (and True). ``claimable`` lets worker processes claim it.
        ``admit`` (the budget gate) runs inside the same transaction, after the
        dedup check and serialised with every other ``create`` of the project;
        an exception from it aborts the create with nothing written.

        A replaced run hands two things to the new one (``carry_over``): its
        ``attempt`` (so the lease token never repeats for a job id: a stale
        worker of the old run cannot write into the new one; ``attempt_base``
        says where the new run started), and what it spent, added to
        ``earlier_runs_usd`` (so re-running a job never erases spend)."""

    @abstractmethod
    def create_many(
        self,
        records: Sequence[dict[str, Any]],
        *,
        claimable: Sequence[bool],
        admit: Callable[[list[int]], None] | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> list[tuple[JobRow, bool]]:
        """``create`` for a batch of distinct job ids, in one transaction: per
        record, what ``create`` returns for it. ``admit(positions)`` (the
        budget gate over the batch) receives the positions of the records that
        will be written (new, or replacing a finished run; live ones are left
        out) and runs inside the transaction like ``create``'s ``admit``; an
        exception from it aborts the whole batch with nothing written. Workers
        are woken once, after the commit, when any claimable job was created.
        ``also(connection)`` runs last in the same transaction, with the
        backend's connection: the links of a pipeline's jobs
        (``nw.jobs.stores.pipelines``); it may raise, as ``admit`` may."""

    @abstractmethod
    def start(self, job_id: str, *, now: float, runner_id: str) -> JobRow | NotYet | None:
        """queued -> running for the process holding the callable; bumps
        ``attempt``, stamps ``started_at`` and a first ``heartbeat_at``. None
        when the job is no longer queued (cancelled first, or gone); ``NotYet``
        when its ``not_before`` has not come or its key's limit is full (the
        limit is checked and the start written under the key's lock, as by
        ``claim``)."""

    @abstractmethod
    def claim(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> list[JobRow]:
        """The first due claimable queued jobs of these kinds in claim order
        (priority, higher first; then the actors' turns, ``actor_seq``; then
        age), each moved to running as by ``start``; never the same job to two
        callers. A job whose limit key has a limit starts only while the key
        has room (``max_running`` running, ``per_second`` starts in the last
        second), decided atomically with every other claim and start of that
        key; a full key's jobs are passed over, not waited for."""

    def claim_and_beat(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> tuple[list[JobRow], list[dict[str, Any]] | None]:
        """``claim``, and the runner's beat (``beat_runner``) with it where the
        store can send both in one round trip: ``(rows, runners)``, the
        runners as ``beat_runner`` returns them, or None where the beat did
        not go (the caller beats as usual). A worker in a trickle of jobs lets
        its beat ride its claims instead of costing a round trip of its own."""
        return self.claim(kinds, now=now, runner_id=runner_id, limit=limit), None

    def lost_claims(self) -> list[JobRow]:
        """The unfinished jobs taken by claims of this handle (``claim``, or a
        finish's refill) that raised though they may have committed: their
        answer was lost (the database went away past the retries) or a later
        round failed. Their claimer never launched them. Each call returns
        them as they stand until none is left unfinished (the claimer puts
        them back in the queue). A store whose claims cannot be lost once
        committed has none (the embedded one: no round trip)."""
        return []

    # ----- limits ---------------------------------------------------------------
    @abstractmethod
    def set_limit(
        self, key: str, *, max_running: int | None, per_second: int | None, now: float
    ) -> None:
        """Set a key's limit; both None removes it."""

    @abstractmethod
    def limits(self, *, now: float) -> list[Limit]:
        """Every limit this store's workers see, with its running count."""

    @abstractmethod
    def queue_ahead(self, *, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` claimable jobs in claim order: ``job_id``,
        ``limit_key``, ``queue_at`` (due), ``priority``, ``eta_p50``,
        ``eta_confidence`` (what a queued job's ETA needs)."""

    @abstractmethod
    def patch(self, job_id: str, fields: Mapping[str, Any], *, attempt: int | None) -> bool:
        """Replace these top-level record fields; refused (False) when ``attempt``
        is given and is not the current one."""

    @abstractmethod
    def finish(
        self,
        job_id: str,
        *,
        au_status: ComputationStatus,
        result: Any,
        error: str | None,
        fields: Mapping[str, Any],
        attempt: int | None,
    ) -> bool:
        """Terminal status entry and record fields (``finished_at`` among them)
        in one transaction; fenced like ``patch``."""

    def finish_soon(self, job_id: str, **finish: Any) -> Future:
        """``finish`` (the same keywords) as a future of its answer, for a caller
        that need not wait for the commit (a body's thread: its slot waits on
        the future instead). A store that commits finishes in groups returns
        before the commit; this one writes first (an error raised by the write
        is the future's)."""
        return settled(lambda: self.finish(job_id, **finish))

    @abstractmethod
    def requeue(
        self, job_id: str, *, fields: Mapping[str, Any], not_before: float, attempt: int | None
    ) -> bool:
        """A failed attempt goes back to the queue, due at ``not_before`` (fenced).
        False, and nothing written, when the attempt is not current or the job
        is finished (a result committed first is never undone)."""

    @abstractmethod
    def request_cancel(self, job_id: str, *, now: float) -> JobRow | None:
        """Queued: cancelled at once (it never runs). Running: the durable flag is
        set and the au entry flipped to CANCELLED; the job reads ``cancelling``
        until its body stops. Finished: nothing is written. None if unknown."""

    @abstractmethod
    def beat(self, job_ids: Iterable[str], *, now: float, runner_id: str) -> set[str]:
        """One coalesced heartbeat for the runner and the running jobs it holds;
        returns the ids among them that this runner should stop: cancel
        requested, already finished, or no longer held by it (reaped and
        claimed again elsewhere)."""

    # ----- learning, progress trail, runners ------------------------------------
    @abstractmethod
    def samples(self, keys: Sequence[str], *, window: int) -> dict[str, list[float]]:
        """The newest ``window`` duration samples of each key, oldest first."""

    @abstractmethod
    def add_samples(self, samples: Mapping[str, float], *, now: float, window: int) -> None:
        """Record one sample per key, keeping the newest ``window``."""

    @abstractmethod
    def append_progress(self, job_id: str, beat: Mapping[str, Any], *, attempt: int | None) -> bool:
        """Append one progress beat (ts, pct, message, stage) to the job's trail."""

    @abstractmethod
    def progress(self, job_id: str, *, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` beats of the trail, oldest first."""

    @abstractmethod
    def register_runner(self, runner_id: str, info: Mapping[str, Any], *, now: float) -> None:
        """Announce a process that runs bodies (its role, host, pid, wake address)."""

    @abstractmethod
    def unregister_runner(self, runner_id: str) -> None: ...

    @abstractmethod
    def runners(self) -> list[dict[str, Any]]:
        """Every announced runner with its last beat."""

    @abstractmethod
    def beat_runner(self, runner_id: str, *, now: float) -> list[dict[str, Any]]:
        """A runner's own beat and then ``runners()``, in one round trip: what a
        worker's reaper judges, read by the beat the worker makes anyway. The
        runner's own row says ``now``."""

    @abstractmethod
    def spend(self, *, actor_id: str | None = None, since: float | None = None) -> dict[str, Any]:
        """Committed spend in one query (of one actor's jobs created at or after
        ``since`` when ``actor_id`` is given): ``actual_usd`` (sum over finished jobs),
        ``live_estimated_usd`` (sum of estimates of unfinished jobs),
        ``live_unknown`` (unfinished jobs with no estimate), ``lower_bound``
        (True when any job that started and finished has an actual that is a
        lower bound or was never reported; a job that never started spent nothing)."""

    # ----- history: prune, totals, metrics ------------------------------------
    @abstractmethod
    def prune(self, *, cutoff: float, batch: int = 500) -> int:
        """Delete the jobs that finished before ``cutoff`` (record, status entry,
        trail), folding what they spent and how they ended into the per-day
        rollup in the same transaction, so ``spend`` and the totals do not
        change; returns how many were deleted."""

    @abstractmethod
    def count_finished_before(self, *, cutoff: float) -> int:
        """How many jobs ``prune(cutoff=cutoff)`` would delete now (a dry run)."""

    @abstractmethod
    def spend_since(self, *, since: float, today: float) -> list[dict[str, Any]]:
        """Spend of the jobs finished since ``since`` (rollup included):
        ``{kind, actor_id ('' for none), today (finished since today), usd,
        lower_bound}`` rows."""

    @abstractmethod
    def budgets(self) -> list[dict[str, Any]]:
        """The stored budgets' rows (``nw.jobs.api.budgets``)."""

    @abstractmethod
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
        """Set the budget ``key`` (``usd=None`` removes it)."""

    @abstractmethod
    def approval(self) -> dict[str, Any] | None:
        """The stored approval rule's row, or None."""

    @abstractmethod
    def set_approval(self, *, threshold_usd: float | None, mode: str, now: float) -> None:
        """Set the approval rule."""

    @abstractmethod
    def budget_spend(
        self, *, since: float | None, actor_id: str | None, kind: str | None
    ) -> dict[str, Any]:
        """Committed spend since ``since`` of an actor's and/or a kind's jobs
        (rollup included), in ``spend``'s form."""

    @abstractmethod
    def counts(self) -> list[dict[str, Any]]:
        """``{state, grade, n}``: how many jobs by status and grade (pruned ones included)."""

    @abstractmethod
    def durations(self, bounds: Sequence[float]) -> dict[str, dict[str, Any]]:
        """Per kind, the finished jobs that ran: ``{count, seconds, buckets: {le: n}}``
        with ``buckets`` cumulative over ``bounds`` (``DURATION_BOUNDS`` of them:
        one pass with a column per bound)."""

    # ----- waking idle workers --------------------------------------------------
    @abstractmethod
    def wake_listener(self, runner_id: str) -> Any:
        """A worker's end: an object with ``address``, ``wait(timeout) -> bool``,
        ``also(store)`` and ``close()``, whose ``wait`` returns early when a job
        is queued."""

    @abstractmethod
    def wake_workers(self) -> None:
        """Tell idle workers a job was queued (best effort; they also poll).
        ``create`` of a claimable job does it by itself."""

    # ----- raw access behind the views ------------------------------------------
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

    # ----- the two views --------------------------------------------------------
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


def utc_iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC).isoformat()


def split_record(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(column values, doc fields) of a record."""
    cols = {k: record.get(k) for k in COLUMNS}
    cols["cancel_requested"] = bool(cols["cancel_requested"])
    cols["attempt"] = int(cols["attempt"] or 0)
    doc = {k: v for k, v in record.items() if k not in COLUMNS}
    return cols, doc


def actor_id_of(record: Mapping[str, Any]) -> str | None:
    actor = record.get("actor")
    return str(actor["id"]) if isinstance(actor, Mapping) and actor.get("id") else None


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


def settled(call: Callable[[], Any]) -> Future:
    """A future already settled with what ``call()`` returns, or what it raises."""
    try:
        value = call()
    except Exception as exc:
        return settled_error(exc)
    future: Future = Future()
    future.set_result(value)
    return future


def settled_error(exc: BaseException) -> Future:
    """A future already settled with ``exc``."""
    future: Future = Future()
    future.set_exception(exc)
    return future
