"""Closing jobs whose worker is gone: the one place a reap is written.

Used on read by the facade (``get_job``/``list_jobs``), at worker boot and by
the worker's periodic reaper. The decision is ``liveness.should_reap``; the
write is fenced by the attempt that was seen, so a reap never overwrites a
job that moved on meanwhile. A cancelling job ends cancelled; a retryable
job with attempts left goes back to the queue; anything else ends FAILED
with ``REAPED_REASON``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from au import ComputationStatus

from nw.jobs import events, liveness
from nw.jobs.body import retry_delay
from nw.jobs.model import ACTIVE_STATUSES, REAPED_REASON, JobsConfig
from nw.jobs.records import JobRow, attempt_in_run, retries_left
from nw.jobs.stores.base import JobStore

log = logging.getLogger("nw.jobs")


def reap(store: JobStore, row: JobRow, now: float, config: JobsConfig) -> bool:
    """Close (or requeue) one job known to need it; True if this call wrote."""
    rec = row.record
    job_id, attempt = rec["job_id"], rec.get("attempt")
    status = row.status.value
    if status == "queued" and liveness.runs_inproc(rec):
        log.warning("job %s: the process that queued it is gone", job_id)
    elif status == "cancelling":
        return _close(store, rec, now, ComputationStatus.CANCELLED, "cancelled")
    elif retries_left(rec):
        log.warning("job %s: worker lost, retrying (attempt %s)", job_id, attempt)
        return store.requeue(
            job_id,
            fields={"error": REAPED_REASON, "error_kind": "crashed", **events.carry_cost(rec)},
            not_before=now + retry_delay(max(attempt_in_run(rec), 1), config),
            attempt=attempt,
        )
    else:
        log.warning("job %s: worker lost, failing it", job_id)
    return _close(store, rec, now, ComputationStatus.FAILED, "crashed")


def _close(store: JobStore, rec: dict, now: float, au_status: ComputationStatus, kind: str) -> bool:
    return store.finish(
        rec["job_id"],
        au_status=au_status,
        result=None,
        error=REAPED_REASON,
        fields={"finished_at": now, "error": REAPED_REASON, "error_kind": kind},
        attempt=rec.get("attempt"),
    )


def owned_queued(row: JobRow) -> bool:
    """Queued for an in-process body: alive only while its owner process beats."""
    return row.status.value == "queued" and liveness.runs_inproc(row.record)


def _owner_beat(store: JobStore, row: JobRow, beats: dict[str, float] | None) -> float | None:
    """The last beat of the process that owns a queued in-process job."""
    if not owned_queued(row):
        return None
    if beats is None:
        beats = runner_beats(store)
    return beats.get(row.record.get("runner_id") or "")


def _dead(
    store: JobStore,
    row: JobRow,
    now: float,
    config: JobsConfig,
    held: bool,
    beats: dict[str, float] | None = None,
) -> bool:
    return liveness.should_reap(
        row.status.value,
        row.record,
        now,
        config,
        held=held,
        owner_beat_at=_owner_beat(store, row, beats),
    )


def maybe_reap(
    store: JobStore,
    row: JobRow,
    now: float,
    config: JobsConfig,
    holds: Callable[[str], bool],
    beats: dict[str, float] | None = None,
) -> JobRow:
    """The row, re-read after a reap when the liveness rule says the job is dead.
    ``beats`` (runner id -> last beat) saves a read per row when reading a page."""
    job_id = row.record["job_id"]
    if row.status not in ACTIVE_STATUSES:
        return row
    if not _dead(store, row, now, config, holds(job_id), beats):
        return row
    reap(store, row, now, config)
    return store.get(job_id) or row


def runner_beats(store: JobStore) -> dict[str, float]:
    return {r["runner_id"]: r["beat_at"] for r in store.runners()}


def reap_stale(
    store: JobStore, now: float, config: JobsConfig, holds: Callable[[str], bool]
) -> list[str]:
    """Every unfinished job of the store whose worker is gone (the periodic reaper)."""
    reaped = []
    beats = runner_beats(store)
    for row in store.live():
        held = holds(row.record["job_id"])
        if _dead(store, row, now, config, held, beats) and reap(store, row, now, config):
            reaped.append(row.record["job_id"])
    return reaped
