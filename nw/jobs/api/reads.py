"""The read paths: ``get_job``, ``list_jobs`` (pages and their ``before``
cursor), ``get_job_progress``, and the read-only ``summarize`` and ``snapshot``.

``get_job`` and ``list_jobs`` reap a job whose worker is gone and keep pct
monotonic; ``summarize`` and ``snapshot`` open the store read-only and write
nothing. A queued job's predicted start and hold come from ``nw.jobs.core.waits``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nw.errors import InvalidValue
from nw.jobs.api import queue_view
from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.core import eta, limits, liveness, waits
from nw.jobs.core.checks import check_grade, check_limit, check_status, check_text, could_name_a_job
from nw.jobs.core.model import (
    ACTIVE_STATUSES,
    DEFAULT_CONFIG,
    Job,
    JobsConfig,
    Status,
)
from nw.jobs.core.records import JobRow, to_job
from nw.jobs.execution import recovery
from nw.jobs.execution.journal import FINISHING_HINT
from nw.jobs.execution.runtimes import LocalRuntimes
from nw.jobs.stores import open_store
from nw.jobs.stores.base import JobStore
from nw.project import as_project


def get_job(
    project: ProjectLike, job_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> Job | None:
    """One job, or None if unknown (any string that cannot name a job is
    unknown). Reaps a job whose worker is gone."""
    if not could_name_a_job(job_id):
        return None
    store, rt = reader(as_project(project), config)
    if store is None:
        return None
    row = store.get(job_id)
    if row is None:
        return None
    return read_job(store, row, rt, config, wait=queue_waits(store, [row], config).get(job_id))


def list_jobs(
    project: ProjectLike,
    *,
    status: str | Status | None = None,
    limit: int = 50,
    actor: str | None = None,
    kind: str | None = None,
    grade: str | None = None,
    q: str | None = None,
    before: str | tuple[float, str] | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[Job]:
    """This project's jobs, newest first (ties by id), optionally by status,
    kind, actor and grade, and by ``q``, a case-insensitive substring of the
    label. ``before`` is a job id (a cursor): only jobs older than it follow,
    so passing the last id of a page walks the whole history, ``limit`` at a
    time. Raises ``InvalidValue`` for a bad filter, or a ``before`` that names
    no job of the project."""
    status = check_status(status)
    limit = check_limit(limit)
    grade = check_grade(grade)
    kind, actor, q = (
        check_text(v, name) for v, name in ((kind, "kind"), (actor, "actor"), (q, "q"))
    )
    store, rt = reader(as_project(project), config)
    if store is None:
        return []
    cursor = _cursor(store, before)
    # A read that reaps moves jobs out of the status asked for (running -> queued
    # or failed): read the page again until it holds only that status, so a page
    # neither lies nor comes back short. Each round reaps what it found, so the
    # rounds are few; the bound only guards against a store that keeps changing.
    for _ in range(_REREADS):
        rows = store.page(
            status=status, actor_id=actor, kind=kind, grade=grade, q=q, before=cursor, limit=limit
        )
        workers = workers_for(store, rows)
        held = queue_waits(store, rows, config)
        page = [
            read_job(store, row, rt, config, workers, held.get(row.record["job_id"]))
            for row in rows
        ]
        if status is None or all(job.status == status for job in page):
            return page
    return [job for job in page if job.status == status]


_REREADS = 10


def cursor_of(
    project: ProjectLike, job_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> tuple[float, str] | None:
    """The ``(created_at, job_id)`` cursor of a job of ``project`` (None if it has
    no such job): what a page merged across projects continues after in each."""
    if not could_name_a_job(job_id):
        return None
    store, _ = reader(as_project(project), config)
    row = store.get(job_id) if store is not None else None
    return None if row is None else (float(row.record["created_at"]), job_id)


def _cursor(store: JobStore, before: str | tuple[float, str] | None) -> tuple[float, str] | None:
    """The ``(created_at, job_id)`` a page continues after: ``before`` is a job id
    of this project, or the cursor of one of another (see ``cursor_of``)."""
    if before is None:
        return None
    if isinstance(before, tuple):
        return float(before[0]), str(before[1])
    if not could_name_a_job(before):
        raise InvalidValue(f"before must be a job id (64 hex characters), got {before!r}")
    row = store.get(before)
    if row is None:
        raise InvalidValue(f"before: no job {before} in this project (pruned, or never there)")
    return float(row.record["created_at"]), before


def get_job_progress(
    project: ProjectLike,
    job_id: str,
    *,
    limit: int = 200,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[dict[str, Any]]:
    """The job's progress trail (ts, pct, message, stage), oldest first; empty if unknown."""
    if not could_name_a_job(job_id):
        return []
    store, _ = reader(as_project(project), config)
    return [] if store is None else store.progress(job_id, limit=check_limit(limit))


def summarize(
    project_root: ProjectLike,
    *,
    limit: int = 50,
    status: str | Status | None = None,
    actor: str | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[Job]:
    """This project's jobs without touching it: creates nothing, reaps nothing,
    caches nothing; [] for a project that never ran a job."""
    status, limit = check_status(status), check_limit(limit)
    store = open_store(as_project(project_root), config, create=False)
    if store is None:
        return []
    try:
        now, rows = config.clock(), store.page(status=status, actor_id=actor, limit=limit)
        workers = workers_for(store, rows)
        return [to_job(r, now, config, recovery.worker_of(r, workers)) for r in rows]
    finally:
        store.close()


def snapshot(
    projects: Iterable[ProjectLike],
    *,
    actor: str | None = None,
    active_limit: int = 20,
    recent_limit: int = 12,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """What is running across projects plus the recently finished tail; read-only
    like ``summarize`` (per project: its unfinished jobs, and the newest of each
    terminal status)."""
    from nw.jobs.core.records import to_dict

    active: list[tuple[str, Job]] = []
    recent: list[tuple[str, Job]] = []
    now = config.clock()
    for proj in projects:
        project = as_project(proj)
        store = open_store(project, config, create=False)
        if store is None:
            continue
        try:
            rows = [r for r in store.live() if _actor_matches(r, actor)]
            workers = workers_for(store, rows)
            held = queue_waits(store, rows, config)
            for status in ("succeeded", "failed", "cancelled"):
                rows += store.page(status=status, actor_id=actor, limit=recent_limit)
        finally:
            store.close()
        latest = {row.record["job_id"]: row for row in rows}  # a job that finished between
        for row in latest.values():  # the two reads appears once, as finished
            worker = recovery.worker_of(row, workers)
            job = to_job(row, now, config, worker, held.get(row.record["job_id"]))
            (recent if job.is_terminal else active).append((str(project.root), job))
    # every stored job has its created_at (Job says Optional for a job being built)
    active.sort(key=lambda pj: pj[1].created_at, reverse=True)  # type: ignore[arg-type,return-value]
    recent.sort(key=lambda pj: pj[1].finished_at or pj[1].created_at, reverse=True)  # type: ignore[arg-type,return-value]
    return {
        "active": [{**to_dict(j), "project": r} for r, j in active[:active_limit]],
        "recent": [{**to_dict(j), "project": r} for r, j in recent[:recent_limit]],
        "active_count": len(active),
        "now": now,
    }


def _actor_matches(row: JobRow, actor: str | None) -> bool:
    who = row.record.get("actor")
    return actor is None or (isinstance(who, Mapping) and who.get("id") == actor)


def stores_to_reap(
    projects: Iterable[ProjectLike], config: JobsConfig
) -> list[tuple[JobStore, Callable[[str], bool]]]:
    """Each project's store that exists, with what this process holds of it
    (for a ``reaper.ReaperThread``: a server keeps its projects reaped)."""
    out = []
    for proj in projects:
        store, rt = reader(as_project(proj), config)
        if store is not None:
            out.append((store, rt.holds if rt is not None else (lambda _id: False)))
    return out


def read_job(
    store: JobStore,
    row: JobRow,
    rt: LocalRuntimes | None,
    config: JobsConfig,
    workers: recovery.Workers | None = None,
    wait: waits.Wait | None = None,
) -> Job:
    """Project one row for a per-project view: reap a dead worker's job, keep pct monotonic."""
    now = config.clock()
    holds = rt.holds if rt is not None else (lambda _id: False)
    if workers is None:  # a finished job has no worker to ask about: no read
        workers = recovery.workers_seen(store) if row.status in ACTIVE_STATUSES else {}
    if not store.read_only:
        row = recovery.maybe_reap(store, row, now, config, holds, workers)
    job = to_job(row, now, config, recovery.worker_of(row, workers), wait)
    if rt is not None and job.status in ACTIVE_STATUSES and rt.is_finishing(job.job_id):
        job = dataclasses.replace(job, label_hint=FINISHING_HINT)  # its outcome is kept
    floor = row.record.get("pct_floor")
    if (
        not store.read_only
        and job.pct is not None
        and job.status in (Status.RUNNING, Status.CANCELLING)
        and (floor is None or job.pct >= float(floor) + 1.0)
    ):
        store.patch(job.job_id, {"pct_floor": job.pct}, attempt=None)
    return job


def queue_waits(store: JobStore, rows: list[JobRow], config: JobsConfig) -> dict[str, waits.Wait]:
    """The predicted start and what holds each queued job of ``rows`` (see
    ``nw.jobs.core.waits``): one replay of the queue for the whole page, only when a
    job is queued, and shared by the reads of the next second (``queue_view``)."""
    queued = [r for r in rows if r.status.value == "queued"]
    if not queued:
        return {}
    now = config.clock()
    kept = queue_view.replay(
        store, now, (r.record["job_id"] for r in queued), lambda: _replay(store, now, config)
    )
    lims, planned = kept.limits, kept.planned
    out = {}
    for row in queued:
        job_id, rec = row.record["job_id"], row.record
        due: Any = rec.get("not_before")
        delayed = isinstance(due, (int, float)) and due > now + 0.5
        key: Any = rec.get("limit_key")
        lim = lims.get(key)
        held = delayed or (lim is not None and limits.is_full(lim))
        if not held and not liveness.runs_inproc(rec) and rec.get("kind") not in kept.served:
            out[job_id] = waits.Wait(None, waits.unserved_text(str(rec.get("kind"))))
            continue
        if job_id in planned:
            out[job_id] = planned[job_id]
            continue
        # in-process (its owner starts it), or beyond the replayed horizon
        if delayed:
            out[job_id] = waits.Wait(None, limits.delay_text(due - now))
        elif lim is not None and limits.is_full(lim):
            out[job_id] = waits.Wait(None, limits.waiting_text(lim))
        elif not liveness.runs_inproc(rec):
            out[job_id] = waits.Wait(None, None)
    return out


def _replay(store: JobStore, now: float, config: JobsConfig) -> queue_view.Replay:
    """Read the queue ahead, the running jobs, the workers and the limits, and
    replay them (``waits.plan_starts``)."""
    lims = {lim.key: lim for lim in store.limits(now=now)}
    running = [
        waits.Running(r.record.get("limit_key"), _remaining(r, now, config))
        for r in store.page(status="running", limit=waits.QUEUE_HORIZON)
    ]
    runners = store.runners()
    seen = recovery.workers_seen(store, runners)
    live = [r for r in runners if liveness.worker_alive(seen[r["runner_id"]], now, config)]
    slots = waits.worker_slots(live, now=now, stale_s=config.heartbeat_stale_s)
    ahead = store.queue_ahead(limit=waits.QUEUE_HORIZON)
    planned = waits.plan_starts(ahead, running, slots=slots, limits=lims, now=now)
    truncated = len(ahead) >= waits.QUEUE_HORIZON
    return queue_view.Replay(now, lims, planned, truncated, waits.kinds_served(live))


def _remaining(row: JobRow, now: float, config: JobsConfig) -> float | None:
    """A running job's expected remaining seconds (None: only a prior says)."""
    started = row.record.get("started_at")
    elapsed = None if started is None else now - float(started)
    view = eta.project_eta(row.record, "running", elapsed_s=elapsed, config=config)
    return None if view.confidence == "prior" else view.remaining_s


def reap_rows(
    store: JobStore, rt: LocalRuntimes | None, rows: list[JobRow], config: JobsConfig
) -> tuple[bool, recovery.Workers]:
    """Reap each job of ``rows`` whose process is gone (the workers read once,
    as for a page): whether any was, and the workers read (for ``read_job``)."""
    workers = workers_for(store, rows)
    if store.read_only:
        return False, workers
    now = config.clock()
    holds = rt.holds if rt is not None else (lambda _id: False)
    out = [recovery.maybe_reap(store, row, now, config, holds, workers) for row in rows]
    return any(a is not b for a, b in zip(rows, out, strict=True)), workers


def workers_for(store: JobStore, rows: list[JobRow]) -> recovery.Workers:
    """The announced workers, read once for a page (not at all for a finished one)."""
    live = any(row.status in ACTIVE_STATUSES for row in rows)
    return recovery.workers_seen(store) if live else {}


def worker_seen(store: JobStore, row: JobRow) -> Any:
    """The job's worker process as the store announces it (None for a finished job)."""
    if row.status not in ACTIVE_STATUSES:
        return None
    return recovery.worker_of(row, recovery.workers_seen(store))
