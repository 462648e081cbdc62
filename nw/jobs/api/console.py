"""The operator's calls: retry, prune, totals and workers (what the console and
``nw-jobs`` act and report on), on the same store as every other facade call.

A retry is a new run of the same job id, through the same cost gate as
``enqueue`` (today's quote, the budget checked inside the create); a prune
keeps the spend it deletes in the store's per-day rollup, so a budget,
``spend`` and ``totals`` read the same before and after.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from nw.errors import InvalidType, InvalidValue
from nw.jobs.api import budgets
from nw.jobs.api.costing import Quote, quote_for
from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.core import eta, ids, kinds, limits, liveness, outcome
from nw.jobs.core.checks import check_text, could_name_a_job
from nw.jobs.core.model import DEFAULT_CONFIG, RUNNER_INPROC, RUNNER_WORKER, Job, JobsConfig
from nw.jobs.core.parked import is_parked
from nw.jobs.core.records import JobRow, new_record, to_job
from nw.jobs.execution import recovery
from nw.jobs.stores import shared_store
from nw.jobs.stores.base import JobStore
from nw.project import Project, as_project

#: The statuses a retry takes: a live job is running, a succeeded one is done.
RETRYABLE = ("failed", "cancelled")
#: The "by actor" row of the jobs enqueued without an actor.
NO_ACTOR = "(no actor)"
#: The page size a bulk retry walks the history with.
_WALK = 500


# ----- retry -----------------------------------------------------------------------
def retry_job(
    project: ProjectLike,
    job_id: str,
    *,
    approved: bool = False,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Job | None:
    """Run a failed or cancelled job again: the same id, a new run (its attempts
    and spend carried on, as a re-enqueue does), claimable by workers, through
    the cost gate of ``enqueue`` (``BudgetExceeded`` before anything is
    written). ``InvalidValue`` for a live or succeeded job, or one whose body
    only exists in the process that enqueued it; None if unknown."""
    if not could_name_a_job(job_id):
        return None
    proj = as_project(project)
    store, _ = reader(proj, config)
    if store is None:
        return None
    row = store.get(job_id)
    if row is None:
        return None
    if row.record.get("pipeline_id") and row.status.value in RETRYABLE:
        from nw.jobs.api.pipeline_retry import retry_step  # the steps it stopped run too

        return retry_step(proj, row, approved=approved, config=config)
    return _retry(proj, store, row, approved=approved, config=config)


def retry_jobs(
    project: ProjectLike,
    *,
    status: str = "failed",
    kind: str | None = None,
    since: float | datetime | None = None,
    approved: bool = False,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[Job]:
    """Retry every job with ``status`` (failed or cancelled), of ``kind`` when
    given, that finished at or after ``since`` (epoch seconds or an aware
    datetime). Under a budget the batch is gated as a whole first (so it is
    refused whole, never half-queued), then each job as it is created. A
    pipeline's steps among them are retried as ``retry_job`` retries one, by
    their pipeline (``retry_pipeline`` of those steps: the steps below them
    re-armed, each step waiting on its upstreams again), one pipeline at a time
    after the other jobs, each through the cost gate as a whole."""
    if status not in RETRYABLE:
        raise InvalidValue(f"status must be one of {', '.join(RETRYABLE)}, got {status!r}")
    kind = check_text(kind, "kind")
    after = _epoch(since, "since")
    proj = as_project(project)
    store, _ = reader(proj, config)
    if store is None:
        return []
    rows = [
        row
        for row in _walk(store, status=status, kind=kind or None)
        if after is None or float(row.record.get("finished_at") or 0.0) >= after
    ]
    if not rows:
        return []
    steps: dict[str, list[str]] = {}  # pipeline id -> its steps to retry
    step_ids = []
    for row in rows:
        if row.record.get("pipeline_id"):
            steps.setdefault(str(row.record["pipeline_id"]), []).append(str(row.record.get("step")))
            step_ids.append(str(row.record["job_id"]))
    rows = [row for row in rows if not row.record.get("pipeline_id")]
    retried = _retry_jobs(proj, store, rows, approved=approved, config=config) if rows else []
    if steps:
        from nw.jobs.api.pipeline_retry import retry_steps

        for pipeline_id, names in steps.items():
            retry_steps(proj, pipeline_id, names, approved=approved, config=config)
        fresh = shared_store(proj, config, create=True).get_many(step_ids)
        now = config.clock()
        retried += [to_job(fresh[j], now, config) for j in step_ids if j in fresh]
    return retried


def _retry_jobs(
    proj: Project, store: JobStore, rows: list[JobRow], *, approved: bool, config: JobsConfig
) -> list[Job]:
    """``retry_jobs`` of jobs outside any pipeline: gated as a whole, then each."""
    runs = new_runs(proj, store, rows, config)
    if config.budget_usd is not None:
        quotes = [quote.estimated_usd for _, quote in runs]
        unknown = any(q is None for q in quotes)
        whole = Quote(
            identity=None,
            estimated_usd=None if unknown else sum(q or 0.0 for q in quotes),
            has_unknown_costs=unknown,
        )
        whole.gate(store, approved=approved, config=config)
    budgets.gate_stored(  # the stored policy over the batch first: refused whole
        store,
        [quote for _, quote in runs],
        [budgets.who_of(record.get("actor"), str(record["kind"])) for record, _ in runs],
        budgets.policy_of(store),
        approved=approved,
        config=config,
        now=config.clock(),
        names=[f"job {record['job_id']}" for record, _ in runs],
    )
    return [
        _create(store, record, quote, approved=approved, config=config) for record, quote in runs
    ]


def _walk(store: JobStore, **filters: Any) -> list[JobRow]:
    """Every job matching ``filters``, newest first, a page at a time."""
    out: list[JobRow] = []
    cursor = None
    while True:
        page = store.page(before=cursor, limit=_WALK, **filters)
        out += page
        if len(page) < _WALK:
            return out
        last = page[-1].record
        cursor = (float(last["created_at"]), last["job_id"])


def _retry(
    proj: Project, store: JobStore, row: JobRow, *, approved: bool, config: JobsConfig
) -> Job:
    status = row.status.value
    if status not in RETRYABLE:
        why = (
            "it is still live" if status in ("queued", "running", "cancelling") else "it succeeded"
        )
        raise InvalidValue(
            f"job {row.record['job_id']} is {status}: only a failed or cancelled job is retried"
            f" ({why})"
        )
    [(record, quote)] = new_runs(proj, store, [row], config)
    return _create(store, record, quote, approved=approved, config=config)


def new_runs(
    proj: Project,
    store: JobStore,
    rows: Sequence[JobRow],
    config: JobsConfig,
    *,
    owners: Sequence[str | None] | None = None,
) -> list[tuple[dict[str, Any], Quote]]:
    """The records of new runs of finished jobs (``rows``) and today's quote
    for each; ``owners[k]``: the runtime of this process that runs row k (a
    ``dispatch`` body, ``retry_pipeline``'s in-process tier), None or absent:
    workers do. Their learned durations are read in one query."""
    owners = list(owners) if owners is not None else [None] * len(rows)
    drafts = [_draft(proj, row, config, owner) for row, owner in zip(rows, owners, strict=True)]
    keys = list(dict.fromkeys(key for d in drafts for key in eta.sample_keys(d.plan)))
    samples = store.samples(keys, window=config.sample_window_k) if keys else {}
    runs = []
    for d, owner in zip(drafts, owners, strict=True):
        rec, spec, kind, params = d.rec, d.spec, d.kind, d.params
        record = new_record(
            job_id=rec["job_id"],
            kind=kind,
            label=str(rec.get("label") or kind),
            idempotency_key=str(rec.get("idempotency_key") or ""),
            params=params,
            now=config.clock(),
            plan=d.plan,
            prediction=eta.prediction_fields(d.plan, samples, config),
            estimated_usd=d.quote.estimated_usd,
            runner=RUNNER_WORKER if owner is None else RUNNER_INPROC,
            max_attempts=d.policy.max_attempts,
            actor=rec.get("actor") if isinstance(rec.get("actor"), Mapping) else None,
            retryable=d.policy.retryable,
            runner_id=owner,
        )
        # the new run counts against the same key at the same priority (not its delay)
        key = limits.key_for(spec.limit_key, kind, params) if spec else rec.get("limit_key")
        record.update(limit_key=key, priority=int(rec.get("priority") or 0))
        runs.append((record, d.quote))
    return runs


@dataclass(frozen=True)
class _Draft:
    """A new run of a finished job before its learned durations are read."""

    rec: Mapping[str, Any]
    spec: kinds.KindSpec | None
    kind: str
    params: dict[str, Any]
    quote: Quote
    policy: outcome.RetryPolicy
    plan: eta.EtaPlan


def _draft(proj: Project, row: JobRow, config: JobsConfig, owner: str | None) -> _Draft:
    """What a new run of ``row`` is made of before its learned durations are
    read: its kind's registration, params, quote, retry policy and ETA plan
    (refused in one line when no process can run it)."""
    rec = row.record
    job_id, kind = rec["job_id"], str(rec.get("kind"))
    spec = kinds.kind_spec(kind)
    if owner is None and liveness.runs_inproc(rec) and spec is None:
        raise InvalidValue(
            f"job {job_id} ran in the process that enqueued it and its kind {kind!r} is not"
            " registered for workers; enqueue it again from that app"
        )
    params = dict(rec.get("params") or {})
    units = ids.check_units(params)
    # this process's registration; without one, what the job was enqueued with
    # (an in-process body's run is not retried: as ``enqueue``'s)
    policy = (
        outcome.RetryPolicy.resolve(spec, config, record=rec)
        if owner is None
        else outcome.RetryPolicy.resolve(None, config)
    )
    quote = quote_for(proj, kind, params, config)
    return _Draft(rec, spec, kind, params, quote, policy, eta.eta_plan(params, units, config))


def _create(
    store: JobStore, record: dict[str, Any], quote: Quote, *, approved: bool, config: JobsConfig
) -> Job:
    job_id, who, now = record["job_id"], record.get("actor"), config.clock()
    quote.gate(store, approved=approved, config=config, job_id=job_id)
    quote.gate_actor(store, who, approved=approved, config=config, job_id=job_id, now=now)
    admit: Callable[[], None] | None = None
    if config.budget_usd is not None or (config.actor_budget_usd is not None and who):

        def admit() -> None:  # again inside the create, where enqueues serialise
            quote.gate(store, approved=approved, config=config, job_id=job_id)
            quote.gate_actor(store, who, approved=approved, config=config, job_id=job_id, now=now)

    kind = str(record.get("kind"))  # the stored spend policy, in the same admit
    admit = budgets.admit_one(
        admit, store, quote, who, kind, approved=approved, config=config, now=now
    )
    # A concurrent retry that got there first is returned as it is (live).
    row, _ = store.create(record, claimable=True, admit=admit)
    return to_job(row, config.clock(), config)


def _epoch(when: float | datetime | None, name: str) -> float | None:
    if when is None:
        return None
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidValue(f"{name} must be an aware datetime (with a time zone)")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        raise InvalidType(f"{name} must be epoch seconds or an aware datetime, got {when!r}")
    return float(when)


# ----- prune -----------------------------------------------------------------------
def prune(
    project: ProjectLike,
    *,
    older_than_s: float,
    dry_run: bool = False,
    config: JobsConfig = DEFAULT_CONFIG,
) -> int:
    """Delete the jobs that finished more than ``older_than_s`` seconds ago
    (their status entries and progress trails too); returns how many. What
    they spent stays in the store's per-day rollup (by kind and actor, with
    their counts by status and grade), so ``spend``, budgets and ``totals``
    do not change. Live jobs are never touched. ``dry_run``: delete nothing,
    and return how many would go."""
    if (
        isinstance(older_than_s, bool)
        or not isinstance(older_than_s, (int, float))
        or not math.isfinite(older_than_s)
        or older_than_s < 0
    ):
        raise InvalidValue(f"older_than_s must be a number of seconds >= 0, got {older_than_s!r}")
    store = shared_store(as_project(project), config, create=False)
    if store is None:
        return 0
    cutoff = config.clock() - float(older_than_s)
    if dry_run:
        return store.count_finished_before(cutoff=cutoff)
    return store.prune(cutoff=cutoff)


# ----- totals ----------------------------------------------------------------------
def totals(
    project: ProjectLike,
    *,
    now: float | datetime | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """Spend today and this week (the last 7 UTC days, today included) by kind
    and by actor, and how many jobs there are by status and by grade (pruned
    ones included). A run's spend counts on the day it finished (its earlier
    attempts and runs with it); ``lower_bound`` says a figure may be higher
    (a job reported an unknown cost, or none)."""
    at = _epoch(now, "now")
    at = config.clock() if at is None else at
    today = datetime.fromtimestamp(at, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    week = today - timedelta(days=6)
    store, _ = reader(as_project(project), config)
    rows = store.spend_since(since=week.timestamp(), today=today.timestamp()) if store else []
    counts = store.counts() if store else []
    spent = {"today": _spend([r for r in rows if r["today"]]), "week": _spend(rows)}
    by_status: dict[str, int] = {}
    by_grade: dict[str, int] = {}
    for r in counts:
        by_status[r["state"]] = by_status.get(r["state"], 0) + r["n"]
        if r["grade"]:
            by_grade[r["grade"]] = by_grade.get(r["grade"], 0) + r["n"]
    return {
        "spend": spent,
        "counts": {"by_status": by_status, "by_grade": by_grade},
        "since": {"today": today.isoformat(), "week": week.isoformat()},
    }


def _spend(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, float] = {}
    by_actor: dict[str, float] = {}
    for r in rows:
        usd = float(r["usd"] or 0.0)
        by_kind[r["kind"]] = round(by_kind.get(r["kind"], 0.0) + usd, 6)
        actor = r["actor_id"] or NO_ACTOR  # so the rows add up to the total
        by_actor[actor] = round(by_actor.get(actor, 0.0) + usd, 6)
    return {
        "usd": round(sum(float(r["usd"] or 0.0) for r in rows), 6),
        "lower_bound": any(r["lower_bound"] for r in rows),
        "by_kind": by_kind,
        "by_actor": by_actor,
    }


# ----- workers ---------------------------------------------------------------------
def workers(project: ProjectLike, *, config: JobsConfig = DEFAULT_CONFIG) -> list[dict[str, Any]]:
    """Every process announced as running bodies for the project: a worker, or
    an app running in-process jobs (``role``), with its host, pid, kinds, slots
    and how many are busy, when it started and last beat, its jobs now, and
    ``state``: ``live``, or ``lost`` by the reaper's predicate
    (``liveness.worker_alive``: silent past ``worker_stale_s`` while others
    beat, or proved gone; listed for ``LOST_KEPT_S`` after its last beat, then
    left out). Live first, then by start."""
    store, _ = reader(as_project(project), config)
    if store is None:
        return []
    now = config.clock()
    held: dict[str, list[str]] = {}
    for row in store.live():
        if row.status.value in ("running", "cancelling") and row.record.get("runner_id"):
            held.setdefault(row.record["runner_id"], []).append(row.record["job_id"])
    out = []
    seen = recovery.workers_seen(store)  # the reaper's own view: beats and proof of death
    for r in store.runners():
        beat = float(r["beat_at"])
        who = seen.get(r["runner_id"])
        alive = who is not None and liveness.worker_alive(who, now, config)
        if not alive and now - beat > liveness.LOST_KEPT_S:
            continue
        jobs = held.get(r["runner_id"], [])
        pid = r.get("pid")
        out.append(
            {
                "runner_id": r["runner_id"],
                "role": r.get("role"),
                "host": r.get("host"),
                "pid": int(pid) if isinstance(pid, (int, float)) else None,
                "kinds": list(r.get("kinds") or []),
                "slots": int(r.get("slots") or 0) or None,
                "busy": len(jobs),
                "started_at": _iso(r["started_at"]),
                "last_beat_at": _iso(beat),
                "state": "live" if alive else "lost",
                "jobs": jobs,
            }
        )
    out.sort(key=lambda w: (w["state"] != "live", w["started_at"] or "", w["runner_id"]))
    return out


def _iso(ts: Any) -> str | None:
    if not isinstance(ts, (int, float)):
        return None
    return datetime.fromtimestamp(float(ts), tz=UTC).isoformat()


# ----- metrics ---------------------------------------------------------------------
#: Upper bounds (seconds) of the job-duration histogram's buckets.
DURATION_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


def metrics(project: ProjectLike, *, config: JobsConfig = DEFAULT_CONFIG) -> dict[str, Any]:
    """What ``GET /metrics`` exposes for one project, as plain data: live jobs
    by kind and status (queue depth, running), finished jobs by (status,
    grade), ``totals``, the committed
    ``spend``, workers by state, and the duration of finished jobs by kind
    (``{count, seconds, buckets}`` over ``DURATION_BUCKETS_S``, of the jobs
    the store holds). ``live[kind]["parked"]``: the running jobs of the kind
    parked on a provider (``nw.jobs.core.parked``), counted among them too."""
    from nw.jobs.api.spending import spend

    proj = as_project(project)
    store, _ = reader(proj, config)
    live: dict[str, dict[str, int]] = {}
    durations: dict[str, dict[str, Any]] = {}
    finished: dict[tuple[str, str], int] = {}
    if store is not None:
        for row in store.live():
            by = live.setdefault(str(row.record.get("kind")), {})
            by[row.status.value] = by.get(row.status.value, 0) + 1
            if is_parked(row.record):  # waiting on a provider, no slot held
                by["parked"] = by.get("parked", 0) + 1
        durations = store.durations(DURATION_BUCKETS_S)
        for r in store.counts():
            if r["grade"]:
                key = (r["state"], r["grade"])
                finished[key] = finished.get(key, 0) + r["n"]
    return {
        "live": live,
        "finished": finished,
        "totals": totals(proj, config=config),
        "spend": spend(proj, config=config),
        "workers": workers(proj, config=config),
        "durations": durations,
    }
