"""The data the facade hands out: ``Job`` and its parts, ``JobsConfig``, ``Status``.

Pure data, no I/O. A ``Job`` is a projection (see ``records.to_job``); nothing
reads a ``Job`` back into a store.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from nw.errors import InvalidSetting


class Status(StrEnum):
    """The five-plus-one job states; a ``str`` enum so it *is* its JSON value."""

    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


QUEUED = Status.QUEUED
RUNNING = Status.RUNNING
CANCELLING = Status.CANCELLING
SUCCEEDED = Status.SUCCEEDED
FAILED = Status.FAILED
CANCELLED = Status.CANCELLED
TERMINAL_STATUSES: frozenset[Status] = frozenset({SUCCEEDED, FAILED, CANCELLED})
ACTIVE_STATUSES: frozenset[Status] = frozenset({QUEUED, RUNNING, CANCELLING})

#: Who runs a job's body (a record's ``runner``): this process's pool, or a worker.
RUNNER_INPROC = "inproc"
RUNNER_WORKER = "worker"
#: How records stored before ``RUNNER_INPROC`` named the in-process tier.
RUNNER_INPROC_LEGACY = "local"
#: The levels a worker's log may be set to (``nw-jobs worker --log-level``).
WORKER_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

ERROR_KIND_REFUSED = "refused"
ERROR_KIND_CANCELLED = "cancelled"
ERROR_KIND_CRASHED = "crashed"

REAPED_REASON = "worker lost"
"""Every reaped job's error starts with this; the rest says what became of it
("worker lost; retrying as attempt 2", "worker lost; no attempts left")."""
UNREADABLE_RECORD_REASON = "the job's stored record is unreadable"
UNREADABLE_PLAN_REASON = (
    "params['plan'] could not be read as a plan, so its cost cannot be quoted; "
    "see the server log for what went wrong"
)

_DEFAULT_PRIORS = MappingProxyType({"image": 12.0, "video": 90.0, "audio": 15.0})


@dataclass(frozen=True)
class JobsConfig:
    """Every tunable of the job manager; keyword-configurable, sensible defaults."""

    # --- ETA ---
    n_min: int = 3
    """Minimum samples for a key before its prediction is ``learned``."""
    sample_window_k: int = 20
    """Keep only the newest K duration samples per key."""
    pct_ceil: int = 99
    """Computed progress never reaches 100; only success sets it."""
    overrun_factor: float = 1.5
    """p90 = p50 * overrun_factor when a real p90 is not available."""
    cache_hit_floor_s: float = 0.5
    """Predicted total of an all-cache-hit plan (confidence ``exact``)."""
    dur_buckets_s: tuple[float, ...] = (4.0, 8.0, 12.0)
    """Upper edges of the output-duration buckets for per-second models."""
    prior_total_s: Mapping[str, float] = field(default_factory=lambda: _DEFAULT_PRIORS)
    """Cold-start priors by output kind (per unit)."""
    default_prior_total_s: float = 30.0
    """Prior when even the output kind is unknown."""
    p90_min_samples: int = 10
    """Samples a key needs for a real p90; with fewer, p90 = p50 * overrun_factor."""
    recency_half_life: float | None = 8.0
    """Age (in samples) at which a duration sample weighs half the newest; None: equal
    weights. Follows slow drift; steps are the change detector's job (see misc/eta.md)."""
    change_z: float | None = 3.5
    """Robust z a level shift in a key's recent log-durations must exceed before the
    older samples are re-levelled to it; None: no change detection (see misc/eta.md)."""
    progress_noise: float = 0.3
    """Log-sd of the rate-based total (elapsed / fraction) at half progress; scales as
    sqrt((1 - f) / f). Smaller trusts reported progress sooner (see misc/eta.md)."""

    # --- liveness ---
    stale_running_s: float = 900.0
    """A RUNNING job older than this with no live worker and no fresh beat is reaped."""
    heartbeat_interval_s: float = 20.0
    """How often a running job's worker stamps ``heartbeat_at``."""
    heartbeat_stale_s: float = 120.0
    """A heartbeat younger than this proves the worker alive, anywhere."""
    worker_beat_interval_s: float = 1.0
    """How often a process that runs bodies stamps its own beat (``runners.beat_at``);
    one small write per process, however many jobs it holds."""
    worker_stale_s: float = 6.0
    """A process whose beat is this much older than the other processes' is dead, and
    so is every job it held (see liveness.py). Larger than the interval by the delay a
    loaded machine may put on a beat thread; paused longer, a worker is reaped and fenced."""

    # --- cost ---
    approval_threshold_usd: float = 1.0
    """Estimated cost at/above which a render requires explicit approval."""
    budget_usd: float | None = None
    """Per-project spend cap (None: no cap)."""
    actor_budget_usd: float | None = None
    """Per-actor spend cap over ``actor_budget_window_s`` (None: no cap); an
    enqueue with an ``actor`` is refused past it as past the project budget."""
    actor_budget_window_s: float = 86400.0
    """The rolling window of ``actor_budget_usd``: the spend of the actor's jobs
    created within it."""
    rates_path: str | None = None
    """A folder or file of rate tables that replaces the shipped ones."""
    pricers: Mapping[str, Any] | None = field(default=None, compare=False)
    """Extra ``nw.pricing`` pricers by cost-basis ``pricer`` name (over the shipped ones)."""

    # --- execution ---
    max_concurrent: int = 10
    """Bodies that run at once per process (threads); the rest wait queued.
    10: a render body mostly waits on a remote service, so a thread is cheap
    and more slots are more renders in flight; for short jobs a worker's batch
    of finishes and claims grows with it (no-op drain, one worker on 2 cores:
    ~1.4x from 3 to 8 slots, ~1.1x more from 8 to 16, see README), while a
    claim never takes more jobs than it has slots, so workers on other hosts
    still get their share."""
    max_attempts: int = 1
    """Attempts per job for a retryable kind (1: never retried)."""
    retry_backoff_s: float = 2.0
    """Base of the exponential retry backoff (jittered)."""
    shutdown_grace_s: float = 30.0
    """How long a stopping worker lets running bodies reach a boundary."""
    job_timeout_s: float | None = None
    """A body running longer is reported (log + ``label_hint``); None: no limit.
    Checked at each heartbeat, so it is as coarse as ``heartbeat_interval_s``."""
    cancel_on_timeout: bool = False
    """Also request cancellation of a body past its time limit."""

    # --- storage ---
    jobs_dirname: str = ".nw/jobs"
    """Sub-path under ``project.root`` for the embedded store."""
    database_url: str | None = None
    """``postgresql://…`` selects PostgreSQL; None: ``NW_JOBS_DATABASE_URL`` or files."""

    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)
    """Wall clock in epoch seconds (injectable for tests)."""

    def __post_init__(self) -> None:
        checks = {
            "n_min": self.n_min >= 1,
            "sample_window_k": self.sample_window_k >= self.n_min,
            "pct_ceil": 0 < self.pct_ceil < 100,
            "overrun_factor": self.overrun_factor >= 1.0,
            "p90_min_samples": self.p90_min_samples >= 2,
            "recency_half_life": self.recency_half_life is None or self.recency_half_life > 0,
            "change_z": self.change_z is None or self.change_z > 0,
            "progress_noise": self.progress_noise > 0,
            "cache_hit_floor_s": self.cache_hit_floor_s > 0,
            "heartbeat_interval_s": self.heartbeat_interval_s > 0,
            "heartbeat_stale_s": self.heartbeat_stale_s > self.heartbeat_interval_s,
            "worker_beat_interval_s": self.worker_beat_interval_s > 0,
            "worker_stale_s": self.worker_stale_s > self.worker_beat_interval_s,
            "max_concurrent": self.max_concurrent >= 1,
            "max_attempts": self.max_attempts >= 1,
            "dur_buckets_s": list(self.dur_buckets_s) == sorted(self.dur_buckets_s),
            "actor_budget_usd": _usd_or_none(self.actor_budget_usd),
            "budget_usd": _usd_or_none(self.budget_usd),
            "approval_threshold_usd": self.approval_threshold_usd is not None
            and _usd_or_none(self.approval_threshold_usd),
            "actor_budget_window_s": self.actor_budget_window_s > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InvalidSetting(f"JobsConfig: invalid value for {', '.join(bad)}")


def _usd_or_none(value: object) -> bool:
    """None, or a finite dollar figure from 0 (no NaN, no bool)."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and value >= 0


DEFAULT_CONFIG = JobsConfig()


@dataclass(frozen=True)
class JobProgress:
    """What the body last reported about its progress."""

    stage_index: int | None = None
    """Stages finished: the 0-based index of the stage now starting (so
    ``stage_count`` once the last has finished). The ETA reads
    ``stage_index / stage_count`` as the share of the work done."""
    stage_count: int | None = None
    current_transform: str | None = None
    fraction: float | None = None


@dataclass(frozen=True)
class JobCost:
    estimated_usd: float | None = None
    """Predicted spend, re-quoted at today's rates; None means unknown."""
    actual_usd: float | None = None
    """What the run reported it spent."""
    cache_hit_savings_usd: float | None = None
    actual_is_lower_bound: bool | None = None
    """True: an unpriced call billed, so ``actual_usd`` understates the spend.
    None: never reported (not the same as exact)."""


@dataclass(frozen=True)
class Job:
    """Projected, JSON-serializable view of one job (see ``to_dict``)."""

    job_id: str
    kind: str
    label: str
    status: Status
    idempotency_key: str
    params: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    queue_wait_s: float | None = None
    elapsed_s: float | None = None
    progress: JobProgress = field(default_factory=JobProgress)
    predicted_total_s: float | None = None
    remaining_s: float | None = None
    eta_ts: datetime | None = None
    eta_s: float | None = None
    pct: float | None = None
    confidence: str | None = None
    label_hint: str | None = None
    eta_key: str | None = None
    cost: JobCost = field(default_factory=JobCost)
    cached: bool = False
    worker_silent_s: float | None = None
    """Seconds since the worker last beat; None when it never beat (not 0)."""
    worker_responsive: bool | None = None
    """By the reaper's own predicate; None = unknowable (not running / never beat)."""
    artifact_ref: str | None = None
    result: Any = None
    error: str | None = None
    error_kind: str | None = None
    """``refused`` | ``cancelled`` | ``crashed``; None while running and on success."""
    error_detail: Any = None
    run_id: str | None = None
    last_event_id: str | None = None
    attempt: int = 0
    max_attempts: int = 1
    grade: str | None = None
    """``ok`` | ``notice`` | ``warning`` | ``error`` once finished; None while live."""
    actor: dict[str, str] | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Every attempt of this run, oldest first: ``attempt``, ``runner_id``,
    ``host``, ``pid``, ``started_at``, ``ended_at``, ``ended`` (succeeded,
    failed, cancelled, requeued, worker lost, stopped; None while it runs),
    ``error``."""
    priority: int = 0
    limit_key: str | None = None
    """The key the job counts against (its kind's ``limit_key``); None: no key."""
    not_before: datetime | None = None
    """Not started before then (``enqueue(not_before=...)``)."""
    starts_at: datetime | None = None
    """A queued job's predicted start (what is ahead of it, its key's limit, the
    live workers' slots); None when that cannot be said. ``eta_s`` of a queued
    job then counts its wait."""
    waiting: str | None = None
    """What holds a queued job now: ``"waiting: fal:kling at 2 of 2"``,
    ``"starts in 40s"``; None when nothing but the queue itself."""
    parked: dict[str, Any] | None = None
    """A running job whose body handed its work to a provider and let its slot
    go (``Submitted``): ``provider``, ``request_id``, ``position`` in the
    provider's queue (0: running there; None: not said), ``since`` and
    ``deadline_at`` (ISO times); ``waiting`` says it in words ("waiting on
    fal, 3rd in queue"). None otherwise."""
    text_replaced: list[str] | None = None
    """Where text no store keeps as given (NUL, a lone surrogate) was stored as
    U+FFFD: ``"result"``, ``"error"`` or a record field's name; None when
    nothing was (``nw/jobs/core/storable.py``)."""
    pipeline_id: str | None = None
    """The pipeline this job is a step of (``jobs.get_pipeline``); None: none."""
    step: str | None = None
    """Its step's name in that pipeline."""
    after: list[str] | None = None
    """The job ids it waits on (a pipeline's upstream steps, or ``enqueue(after=...)``)."""

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES
