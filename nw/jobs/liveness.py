"""Is a job's worker alive? One predicate, used by the reaper and by every ``Job``.

A screen and the reaper must never disagree about "alive", so both call
``heartbeat_is_fresh``. ``None`` means unknowable (not running, or never
beat), which is not the same claim as dead.

Reap rule: a running or cancelling job is closed when no worker in this
process holds it and its heartbeat is stale (older than
``heartbeat_stale_s``) or, when it never beat, it started more than
``stale_running_s`` ago. Every start stamps a first beat, so a killed worker
is found within ``heartbeat_stale_s``; the long rule only covers records that
never beat at all. A job queued for an in-process body (``runs_inproc``)
can only ever run in the process that enqueued it, so it is closed when that
process's runner beat is stale or gone: otherwise it would wait forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nw.jobs.model import RUNNER_INPROC, RUNNER_INPROC_LEGACY, JobsConfig

_LIVE = ("running", "cancelling")


def runs_inproc(record: Mapping[str, Any]) -> bool:
    """The job's body runs in the process that enqueued it (records stored
    before the rename say ``local``)."""
    return record.get("runner") in (RUNNER_INPROC, RUNNER_INPROC_LEGACY)


def worker_silent_s(record: Mapping[str, Any], now: float) -> float | None:
    beat = record.get("heartbeat_at")
    return None if beat is None else max(now - float(beat), 0.0)


def heartbeat_is_fresh(record: Mapping[str, Any], now: float, config: JobsConfig) -> bool | None:
    silent = worker_silent_s(record, now)
    return None if silent is None else silent < config.heartbeat_stale_s


def worker_responsive(
    status: str, record: Mapping[str, Any], now: float, config: JobsConfig
) -> bool | None:
    if status not in _LIVE:
        return None
    return heartbeat_is_fresh(record, now, config)


def should_reap(
    status: str,
    record: Mapping[str, Any],
    now: float,
    config: JobsConfig,
    *,
    held: bool,
    owner_beat_at: float | None = None,
) -> bool:
    """``held``: a thread of this process holds the job (it is alive)."""
    if held:
        return False
    if status == "queued" and runs_inproc(record):
        return owner_beat_at is None or now - owner_beat_at >= config.heartbeat_stale_s
    if status not in _LIVE:
        return False
    fresh = heartbeat_is_fresh(record, now, config)
    if fresh is not None:
        return not fresh
    started = record.get("started_at") or record.get("created_at")
    return started is not None and now - float(started) > config.stale_running_s
