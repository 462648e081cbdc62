"""The index record: how one is born and how it projects to a ``Job`` (pure).

A record is a flat dict (flat so every backend can merge a patch with a
shallow update). Times are epoch seconds (UTC); ``Job`` shows aware datetimes.
The status comes from the status store's entry, never from the record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nw.jobs.core import eta, events, liveness, parked
from nw.jobs.core.model import (
    ACTIVE_STATUSES,
    FAILED,
    UNREADABLE_RECORD_REASON,
    Job,
    JobCost,
    JobProgress,
    JobsConfig,
    Status,
)
from nw.jobs.core.status import cancelled_error, grade, job_status
from nw.jobs.core.storable import REPLACED_FIELD
from nw.jobs.core.waits import Wait


@dataclass(frozen=True)
class JobRow:
    """What a store returns for one job: the index record and the status entry."""

    record: dict[str, Any]
    au_status: str
    result: Any = None
    error: str | None = None

    @property
    def status(self) -> Status:
        if self.record.get("unreadable"):
            return FAILED
        return job_status(
            self.au_status,
            cancel_requested=bool(self.record.get("cancel_requested")),
            finished=self.record.get("finished_at") is not None,
        )


def new_record(
    *,
    job_id: str,
    kind: str,
    label: str,
    idempotency_key: str,
    params: dict[str, Any],
    now: float,
    plan: eta.EtaPlan,
    prediction: dict[str, Any],
    estimated_usd: float | None,
    runner: str,
    max_attempts: int,
    actor: dict[str, str] | None = None,
    retryable: bool = False,
    runner_id: str | None = None,
) -> dict[str, Any]:
    """A queued job's record. ``runner`` is ``RUNNER_INPROC`` (an in-process body
    owned by the runner ``runner_id``) or ``RUNNER_WORKER`` (claimable by worker
    processes)."""
    return {
        "job_id": job_id,
        "kind": kind,
        "label": label,
        "idempotency_key": idempotency_key,
        "params": params,
        "created_at": now,
        "started_at": None,
        "finished_at": None,
        "heartbeat_at": None,
        "attempt": 0,
        "max_attempts": max_attempts,
        "cancel_requested": False,
        "runner": runner,
        "runner_id": runner_id,
        "retryable": retryable,
        "run_id": uuid.uuid4().hex,
        "actor": actor,
        "estimated_usd": estimated_usd,
        "eta_candidates": list(plan.candidates),
        "output_kind": plan.output_kind,
        "units": plan.units,
        "expected_cache_hit": plan.expected_cache_hit,
        **prediction,
    }


OVERDUE_HINT = "past its time limit"


def attempt_in_run(record: Mapping[str, Any]) -> int:
    """The attempt within this run: the stored ``attempt`` is the job's lease
    counter, which carries on across runs (see ``JobStore.create``)."""
    return int(record.get("attempt") or 0) - int(record.get("attempt_base") or 0)


def max_attempts_of(record: Mapping[str, Any]) -> int:
    """How many attempts the job's run may take, as recorded when it began
    (``RetryPolicy.resolve``; a record without it runs once)."""
    return int(record.get("max_attempts") or 1)


def unreadable_record(job_id: str, why: str) -> dict[str, Any]:
    """Stand-in for a record that cannot be decoded: reads as FAILED, says why."""
    return {
        "job_id": job_id,
        "kind": "unknown",
        "label": "unreadable job",
        "idempotency_key": "",
        "params": {},
        "unreadable": True,
        "error": f"{UNREADABLE_RECORD_REASON} ({why})",
        "error_kind": "crashed",
        "finished_at": None,
    }


def outcome_of(row: JobRow) -> tuple[str | None, str | None, str | None]:
    """(error, error_kind, grade) as a job reads (the rule ``to_job`` applies;
    the stores' grade filter mirrors it)."""
    status = row.status
    error = row.record.get("error") or row.error
    error_kind = row.record.get("error_kind")
    if status.value == "succeeded":
        error, error_kind = None, None
    error, error_kind = cancelled_error(status, error, error_kind)
    return error, error_kind, grade(status, error=error, error_kind=error_kind, result=row.result)


def attempts_of(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's attempts as the contract shows them (oldest first)."""
    out = []
    for entry in record.get("attempts") or ():
        if not isinstance(entry, Mapping):
            continue
        pid = entry.get("pid")
        out.append(
            {
                "attempt": int(entry.get("attempt") or 0),
                "runner_id": entry.get("runner_id"),
                "host": entry.get("host"),
                "pid": int(pid) if isinstance(pid, (int, float)) else None,
                "started_at": _iso(entry.get("started_at")),
                "ended_at": _iso(entry.get("ended_at")),
                "ended": entry.get("ended"),
                "error": entry.get("error"),
            }
        )
    return out


def _iso(ts: Any) -> str | None:
    when = _dt(ts) if isinstance(ts, (int, float)) else None
    return None if when is None else when.isoformat()


def _dt(ts: Any) -> datetime | None:
    """The time, or None for a time no calendar holds (past year 9999: a prediction
    scaled past it must not break every read of the project)."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def queued_since(record: Mapping[str, Any], until: float) -> float:
    """When the job was last put in the queue before ``until``: its creation, or
    the end of its last attempt (a requeued job's wait does not count the run
    that came before it)."""
    since = float(record["created_at"])
    attempts = record.get("attempts")
    for a in attempts if isinstance(attempts, list) else ():
        ended = a.get("ended_at") if isinstance(a, Mapping) else None
        if isinstance(ended, (int, float)) and not isinstance(ended, bool) and ended <= until:
            since = max(since, float(ended))
    return since


def to_job(
    row: JobRow,
    now: float,
    config: JobsConfig,
    worker: liveness.WorkerSeen | None = None,
    wait: Wait | None = None,
) -> Job:
    """The ``Job`` a stored row reads as at ``now`` (status, ETA, cost, liveness).
    ``worker``: the job's worker process as the store announces it (liveness.py).
    ``wait`` (``nw.jobs.core.waits``): a queued job's predicted start and what holds
    it; with it, the job's ``eta_s`` counts the wait, and is unknown
    ("estimating…") when the start is."""
    rec = row.record
    status = row.status
    created, started, finished = (
        rec.get("created_at"),
        rec.get("started_at"),
        rec.get("finished_at"),
    )
    queue_wait = None
    if created is not None:
        until = started if started is not None else (finished or now)
        queue_wait = until - queued_since(rec, until)
    elapsed = None
    if started is not None:
        elapsed = (finished if finished is not None else now) - started
    view = eta.project_eta(rec, status.value, elapsed_s=elapsed, config=config)
    live = status in ACTIVE_STATUSES
    label_hint = view.label_hint
    if live and rec.get("overdue_at") is not None:
        label_hint = OVERDUE_HINT
    eta_s = view.eta_s
    starts_at = None
    if status.value == "queued" and wait is not None:
        if wait.start_in_s is None or view.eta_s is None:
            eta_s, label_hint = None, eta.ESTIMATING
        else:
            starts_at = _dt(now + wait.start_in_s)
            eta_s = wait.start_in_s + view.eta_s
        if wait.reason:
            label_hint = wait.reason
    shown_parked, waiting = (
        None,
        _upstream_wait(rec, status.value)
        or (wait.reason if wait is not None and status.value == "queued" else None),
    )
    if live and parked.is_parked(rec):
        shown_parked, waiting = (
            _parked(rec[parked.PARKED_FIELD]),
            parked.waiting_text(rec[parked.PARKED_FIELD]),
        )
        left = parked.eta_of(rec[parked.PARKED_FIELD], now)
        if left is not None:
            eta_s = left
    eta_ts = _dt(now + eta_s) if (eta_s is not None and live) else None
    result = row.result
    error, error_kind, graded = outcome_of(row)
    return _job(
        job_id=rec["job_id"],
        kind=rec.get("kind", "unknown"),
        label=rec.get("label") or rec.get("kind", ""),
        status=status,
        idempotency_key=rec.get("idempotency_key", ""),
        params=rec.get("params") or {},
        created_at=_dt(created),
        started_at=_dt(started),
        finished_at=_dt(finished),
        queue_wait_s=_round(queue_wait),
        elapsed_s=_round(elapsed),
        progress=JobProgress(
            stage_index=rec.get("stage_index"),
            stage_count=rec.get("stage_count"),
            current_transform=rec.get("current_transform"),
            fraction=rec.get("fraction"),
        ),
        predicted_total_s=_round(view.predicted_total_s),
        remaining_s=_round(view.remaining_s),
        eta_ts=eta_ts,
        eta_s=_round(eta_s) if live else None,
        pct=view.pct,
        confidence=view.confidence,
        label_hint=label_hint,
        eta_key=rec.get("eta_key"),
        cost=JobCost(
            estimated_usd=rec.get("estimated_usd"),
            actual_usd=events.total_actual(rec),
            cache_hit_savings_usd=rec.get("cache_hit_savings_usd"),
            actual_is_lower_bound=rec.get("actual_is_lower_bound"),
        ),
        cached=bool(rec.get("cached")),
        worker_silent_s=(
            _round(liveness.worker_silent_s(rec, now, worker))
            if live and shown_parked is None  # parked: no worker holds it
            else None
        ),
        worker_responsive=liveness.worker_responsive(status.value, rec, now, config, worker),
        artifact_ref=rec.get("artifact_ref"),
        result=result,
        error=error,
        error_kind=error_kind,
        error_detail=rec.get("error_detail"),
        run_id=rec.get("run_id"),
        last_event_id=rec.get("last_event_id"),
        attempt=attempt_in_run(rec),
        max_attempts=max_attempts_of(rec),
        grade=graded,
        actor=rec.get("actor"),
        attempts=attempts_of(rec),
        priority=int(rec.get("priority") or 0),
        limit_key=rec.get("limit_key"),
        not_before=_dt(rec.get("not_before")),
        starts_at=starts_at,
        waiting=waiting,
        parked=shown_parked,
        text_replaced=_names(rec.get(REPLACED_FIELD)),
        pipeline_id=_text(rec.get("pipeline_id")),
        step=_text(rec.get("step")),
        after=_upstreams(rec.get("after")),
    )


_JOB_FIELDS = frozenset(Job.__dataclass_fields__)


def _job(**fields: Any) -> Job:
    """``Job(**fields)`` for every field given, at a fifteenth of its cost: a
    frozen dataclass's ``__init__`` sets each of Job's fields through
    ``object.__setattr__`` (7 µs a job, the largest part of ``to_job``, which
    every read and each job of an ``enqueue_many`` batch pays). The instance
    is the one ``__init__`` makes: the same ``__dict__``, equal, as frozen."""
    if fields.keys() != _JOB_FIELDS:  # a field left to its default: the long way
        return Job(**fields)
    job = object.__new__(Job)
    job.__dict__.update(fields)
    return job


def _parked(info: Mapping[str, Any]) -> dict[str, Any]:
    """What a parked job shows of its ``parked`` field (times as ISO text)."""
    position = info.get("position")
    return {
        "provider": info.get("provider"),
        "request_id": info.get("request_id"),
        "position": position if isinstance(position, int) else None,
        "since": _iso(info.get("since")),
        "deadline_at": _iso(info.get("deadline_at")),
    }


def waits_on_upstreams(rec: Mapping[str, Any]) -> bool:
    """The job comes after others (``after``) that have not released it yet
    (no ``released_at``; nw/jobs/api/pipelines.py)."""
    after = rec.get("after")
    return isinstance(after, list) and bool(after) and rec.get("released_at") is None


def _upstream_wait(rec: Mapping[str, Any], status: str) -> str | None:
    """``waiting: after storyboard`` for a queued job whose upstreams have not
    released it yet."""
    if status != "queued" or not waits_on_upstreams(rec):
        return None
    after = rec["after"]
    names = [
        str(u.get("step") or str(u.get("job_id", ""))[:12]) for u in after if isinstance(u, dict)
    ]
    return f"waiting: after {', '.join(names)}"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _upstreams(value: Any) -> list[str] | None:
    """The job ids of a stored ``after`` (a list of ``{job_id, step, ...}``)."""
    if not isinstance(value, list) or not value:
        return None
    ids = [u.get("job_id") for u in value if isinstance(u, dict)]
    return [i for i in ids if isinstance(i, str)] or None


def _names(value: Any) -> list[str] | None:
    """A stored list of names, or None (also for anything else)."""
    if not isinstance(value, list) or not value:
        return None
    return [str(v) for v in value]


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


def to_dict(job: Job) -> dict[str, Any]:
    """The JSON contract: every field of ``Job``; nested parts as plain dicts."""
    out: dict[str, Any] = {}
    for name in job.__dataclass_fields__:
        out[name] = _plain(getattr(job, name))
    return out


_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    # Exact types first: a page of jobs is mostly plain JSON already, and the
    # ABC check (Mapping) below is what made a page of 50 cost milliseconds.
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {str(k): _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    if isinstance(value, Status):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (JobProgress, JobCost)):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)
