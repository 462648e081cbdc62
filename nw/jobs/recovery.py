"""Closing jobs whose worker is gone: the one place a reap is written.

Used on read by the facade (``get_job``/``list_jobs``), at worker boot and by
the worker's periodic reaper. Whether a job is dead is ``liveness.should_reap``;
what becomes of it (cancelled, back in the queue, failed; and the words that
say so) is ``outcome.decide``. The write is fenced by the attempt that was
seen, so a reap never overwrites a job that moved on meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from nw.jobs import liveness, outcome
from nw.jobs.model import ACTIVE_STATUSES, JobsConfig
from nw.jobs.records import JobRow
from nw.jobs.stores.base import JobStore

log = logging.getLogger("nw.jobs")


def reap(
    store: JobStore,
    row: JobRow,
    now: float,
    config: JobsConfig,
    owner_beat_at: float | None = None,
) -> bool:
    """Close (or requeue) one job known to need it; True if this call wrote.
    ``owner_beat_at``: for a job queued in-process, its owner's last beat."""
    rec = row.record
    job_id, attempt = rec["job_id"], rec.get("attempt")
    status = row.status.value
    orphaned = status == "queued" and liveness.runs_inproc(rec)
    ending = outcome.Ending(
        outcome.Ended.ORPHANED if orphaned else outcome.Ended.LOST,
        last_sign_of_life(rec, now, owner_beat_at),
    )
    decided = outcome.decide(
        ending,
        rec,
        outcome.RetryPolicy.of(rec, config),
        now=now,
        cancel_requested=status == "cancelling",
    )
    log.warning("job %s (attempt %s): %s", job_id, attempt, decided.note)
    return outcome.write(store, job_id, attempt, decided)


def last_sign_of_life(rec: Mapping[str, Any], now: float, owner_beat_at: float | None) -> float:
    """When the job was last known alive: its last heartbeat (or its start, or, for
    a job that never started, its owner's last beat); never later than ``now``."""
    seen = [
        float(t)
        for t in (rec.get("heartbeat_at"), rec.get("started_at"), owner_beat_at)
        if isinstance(t, (int, float))
    ]
    return min(max(seen), now) if seen else now


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
    row: JobRow, now: float, config: JobsConfig, held: bool, owner_beat_at: float | None
) -> bool:
    return liveness.should_reap(
        row.status.value,
        row.record,
        now,
        config,
        held=held,
        owner_beat_at=owner_beat_at,
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
    owner_beat_at = _owner_beat(store, row, beats)
    if not _dead(row, now, config, holds(job_id), owner_beat_at):
        return row
    reap(store, row, now, config, owner_beat_at)
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
        owner_beat_at = _owner_beat(store, row, beats)
        dead = _dead(row, now, config, held, owner_beat_at)
        if dead and reap(store, row, now, config, owner_beat_at):
            reaped.append(row.record["job_id"])
    return reaped
