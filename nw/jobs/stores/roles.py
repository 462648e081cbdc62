"""The store contract split by role, so each side depends on what it uses.

``JobStore`` (``base.py``) is every role at once; the worker's side is typed
by ``WorkerStore`` (queue, running, runners, learning and the reads), the
reaper's by ``Reaping``, the console's reads by ``JobReads`` and ``History``,
the spend gate by ``SpendPolicy``, as pgqueuer's ``ports/repository.py``
splits its store. The declarations are the contract (``tests/contract``
holds every engine to them); each engine's module implements all of them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from au import ComputationStatus

from nw.jobs.core.limits import Limit, NotYet
from nw.jobs.core.records import JobRow
from nw.jobs.stores.parking import ParkedStore


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


class JobReads(Protocol):
    """What any reader of jobs uses: one job, pages, the live ones, their
    trails, a change signal (the facade's reads, the console, ``jobs.wait``)."""

    @abstractmethod
    def get(self, job_id: str) -> JobRow | None:
        """The job's record and status entry, or None if it is not in the index."""

    @abstractmethod
    def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRow]:
        """The rows of these jobs (those in the index), by job id: a pipeline's
        steps, a fan-in's upstreams. A backend reads them in one query."""

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

    @abstractmethod
    def progress(self, job_id: str, *, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` beats of the trail, oldest first."""


class Queue(Protocol):
    """Putting jobs in and taking them out: creates (put-if-absent), starts
    and claims (each a new attempt), cancel requests, waking idle workers."""

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

    @abstractmethod
    def request_cancel(self, job_id: str, *, now: float) -> JobRow | None:
        """Queued: cancelled at once (it never runs). Running: the durable flag is
        set and the au entry flipped to CANCELLED; the job reads ``cancelling``
        until its body stops. Finished: nothing is written. None if unknown."""

    @abstractmethod
    def wake_workers(self) -> None:
        """Tell idle workers a job was queued (best effort; they also poll).
        ``create`` of a claimable job does it by itself."""


class Running(Protocol):
    """What a running attempt writes, each fenced by its attempt: fields,
    progress beats, the finish or a requeue, the heartbeat."""

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
    def beat(self, job_ids: Iterable[str], *, now: float, runner_id: str) -> set[str]:
        """One coalesced heartbeat for the runner and the running jobs it holds;
        returns the ids among them that this runner should stop: cancel
        requested, already finished, or no longer held by it (reaped and
        claimed again elsewhere)."""

    @abstractmethod
    def append_progress(self, job_id: str, beat: Mapping[str, Any], *, attempt: int | None) -> bool:
        """Append one progress beat (ts, pct, message, stage) to the job's trail."""


class Runners(Protocol):
    """The workers' own rows: who runs, their beats (the reaper's evidence),
    their wake addresses."""

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
    def wake_listener(self, runner_id: str) -> Any:
        """A worker's end: an object with ``address``, ``wait(timeout) -> bool``,
        ``also(store)`` and ``close()``, whose ``wait`` returns early when a job
        is queued."""


class Limits(Protocol):
    """The project's limits and the queue as the limits see it."""

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


class Learning(Protocol):
    """Learned durations (the ETA's samples)."""

    @abstractmethod
    def samples(self, keys: Sequence[str], *, window: int) -> dict[str, list[float]]:
        """The newest ``window`` duration samples of each key, oldest first."""

    @abstractmethod
    def add_samples(self, samples: Mapping[str, float], *, now: float, window: int) -> None:
        """Record one sample per key, keeping the newest ``window``."""


class History(Protocol):
    """Totals over every job, the pruned ones included (spend, counts, durations), and pruning."""

    @abstractmethod
    def spend(self, *, actor_id: str | None = None, since: float | None = None) -> dict[str, Any]:
        """Committed spend in one query (of one actor's jobs created at or after
        ``since`` when ``actor_id`` is given): ``actual_usd`` (sum over finished jobs),
        ``live_estimated_usd`` (sum of estimates of unfinished jobs),
        ``live_unknown`` (unfinished jobs with no estimate), ``lower_bound``
        (True when any job that started and finished has an actual that is a
        lower bound or was never reported; a job that never started spent nothing)."""

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
    def counts(self) -> list[dict[str, Any]]:
        """``{state, grade, n}``: how many jobs by status and grade (pruned ones included)."""

    @abstractmethod
    def durations(self, bounds: Sequence[float]) -> dict[str, dict[str, Any]]:
        """Per kind, the finished jobs that ran: ``{count, seconds, buckets: {le: n}}``
        with ``buckets`` cumulative over ``bounds`` (``DURATION_BOUNDS`` of them:
        one pass with a column per bound)."""

    @abstractmethod
    def quoted_and_billed(
        self, *, since: float, kind: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """Finished runs since ``since`` (of ``kind``, or every kind), newest
        first, at most ``limit``: each run's quote beside its bill (the cost
        accuracy report, nw/jobs/api/accuracy.py)."""


class SpendPolicy(Protocol):
    """The stored spend policy (budgets, approval) and the spend a budget counts."""

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
    def policy_rows(self) -> list[dict[str, Any]]:
        """The budgets and the approval row in one read (every enqueue pays it)."""

    @abstractmethod
    def hold_budgets(self, keys: Sequence[str]) -> None:
        """Hold these budgets for the rest of an admitted create, so two creates
        cannot both spend a budget's last dollars (a no-op where the create
        already holds the store's write lock)."""


class WorkerStore(JobReads, Queue, Running, Runners, Learning, ParkedStore, Protocol):
    """What a worker and the in-process runtime use of a store."""

    read_only: bool
    refill: Refill | None


class Settling(JobReads, Running, Protocol):
    """What ends a job by the outcome policy: its row read, its ending written."""


class Reaping(Settling, Runners, Protocol):
    """What the reaper and orphan recovery use: the live jobs, the runners'
    beats, and the finishes and requeues that settle a dead worker's jobs."""
