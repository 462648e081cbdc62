"""Closing jobs whose worker is gone: the one place a reap is written.

Used on read by the facade (``get_job``/``list_jobs``), at worker boot and by
the ``reaper.Reaper`` that every worker and ``nw-jobs serve`` run. Whether a
job is dead is ``liveness.should_reap``; what becomes of it (cancelled, back
in the queue, failed; and the words that say so) is ``outcome.decide``. The
write is fenced by the attempt that was seen, so a reap never overwrites a
job that moved on meanwhile.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from nw.jobs.core import liveness, outcome
from nw.jobs.core.liveness import WorkerSeen
from nw.jobs.core.model import ACTIVE_STATUSES, JobsConfig
from nw.jobs.core.records import JobRow
from nw.jobs.execution import procs
from nw.jobs.stores.roles import Reaping

log = logging.getLogger("nw.jobs")


def reap(
    store: Reaping,
    row: JobRow,
    now: float,
    config: JobsConfig,
    worker_beat_at: float | None = None,
) -> bool:
    """Close (or requeue) one job known to need it; True if this call wrote.
    ``worker_beat_at``: the last beat of its worker (or, for a job queued
    in-process, of its owner)."""
    rec = row.record
    job_id, attempt = rec["job_id"], rec.get("attempt")
    status = row.status.value
    orphaned = status == "queued" and liveness.runs_inproc(rec)
    ending = outcome.Ending(
        outcome.Ended.ORPHANED if orphaned else outcome.Ended.LOST,
        last_sign_of_life(rec, now, worker_beat_at),
    )
    decided = outcome.decide(
        ending,
        rec,
        outcome.RetryPolicy.of(rec, config),
        now=now,
        cancel_requested=status == "cancelling",
    )
    # An event, not a complaint: a read that reaps must not print into a CLI
    # user's output (the worker's log, at INFO, still says it).
    log.info("job %s (attempt %s): %s", job_id, attempt, decided.note)
    return outcome.write(store, job_id, attempt, decided)


def last_sign_of_life(rec: Mapping[str, Any], now: float, worker_beat_at: float | None) -> float:
    """When the job was last known alive: its last heartbeat, its start, or its
    worker's (or, for a job that never started, its owner's) last beat, whichever
    is latest; never later than ``now``."""
    seen = [
        float(t)
        for t in (rec.get("heartbeat_at"), rec.get("started_at"), worker_beat_at)
        if isinstance(t, (int, float))
    ]
    return min(max(seen), now) if seen else now


def owned_queued(row: JobRow) -> bool:
    """Queued for an in-process body: alive only while its owner process beats."""
    return row.status.value == "queued" and liveness.runs_inproc(row.record)


Workers = dict[str, WorkerSeen]


def workers_seen(store: Reaping, rows: list[dict[str, Any]] | None = None) -> Workers:
    """Every announced worker process: its last beat, the freshest beat of the
    others, and whether this host can prove it gone (one read of the small
    runners table, unless ``rows`` of it were just read)."""
    if rows is None:
        rows = store.runners()
    beats = sorted((float(r["beat_at"]), r["runner_id"]) for r in rows)

    def others_at(runner_id: str) -> float:  # the freshest beat that is not its own
        return next((at for at, rid in reversed(beats) if rid != runner_id), -math.inf)

    return {
        r["runner_id"]: WorkerSeen(
            float(r["beat_at"]), procs.provably_gone(r), others_at(r["runner_id"])
        )
        for r in rows
    }


def worker_of(row: JobRow, workers: Workers | None) -> WorkerSeen | None:
    return None if workers is None else workers.get(row.record.get("runner_id") or "")


def _dead(row: JobRow, now: float, config: JobsConfig, held: bool, workers: Workers) -> bool:
    return liveness.should_reap(
        row.status.value, row.record, now, config, held=held, worker=worker_of(row, workers)
    )


def _beat_of(row: JobRow, workers: Workers) -> float | None:
    worker = worker_of(row, workers)
    return None if worker is None else worker.beat_at


def maybe_reap(
    store: Reaping,
    row: JobRow,
    now: float,
    config: JobsConfig,
    holds: Callable[[str], bool],
    workers: Workers | None = None,
) -> JobRow:
    """The row, re-read after a reap when the liveness rule says the job is dead.
    ``workers`` (from ``workers_seen``) saves a read per row when reading a page."""
    job_id = row.record["job_id"]
    if row.status not in ACTIVE_STATUSES:
        return row
    if workers is None:
        workers = workers_seen(store)
    if not _dead(row, now, config, holds(job_id), workers):
        return row
    reap(store, row, now, config, _beat_of(row, workers))
    return store.get(job_id) or row


def reap_stale(
    store: Reaping,
    now: float,
    config: JobsConfig,
    holds: Callable[[str], bool],
    workers: Workers | None = None,
) -> list[str]:
    """Every unfinished job of the store whose worker is gone (a full pass).
    Jobs queued for a worker's claim are not read: no worker holds them yet,
    and a backlog of them made each pass (at boot, then every
    ``heartbeat_interval_s``) read and decode the whole queue."""
    reaped = []
    if workers is None:
        workers = workers_seen(store)
    for row in store.live(claimable=False):
        held = holds(row.record["job_id"])
        dead = _dead(row, now, config, held, workers)
        if dead and reap(store, row, now, config, _beat_of(row, workers)):
            reaped.append(row.record["job_id"])
    return reaped
