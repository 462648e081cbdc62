"""``wait`` and ``watch``: a job followed until it ends, woken by its store.

A caller that needs a job's end (a script, a request handler streaming a
render's progress) used to poll ``get_job``. Here the store's change signal
wakes the reader instead (``JobStore.subscribe``: the OS's report of a write
to the embedded store's folder; a ``NOTIFY`` in the statements that end a
job or ask for a cancel on PostgreSQL): the job is read once on subscribing,
then once per signal. A read every ``RECHECK_S`` besides covers what no
signal says (a job whose worker died is reaped by the read itself) and a
lost ``LISTEN`` connection. ``watch`` also reads a running job every
``WATCH_PROGRESS_S``: on PostgreSQL a progress beat sends no signal.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nw.errors import InvalidType, InvalidValue
from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.api.reads import get_job
from nw.jobs.core.model import DEFAULT_CONFIG, Job, JobsConfig
from nw.jobs.core.records import to_dict
from nw.jobs.stores.base import JobStore
from nw.project import as_project

#: The longest a waiter sleeps without reading its job, signal or not.
RECHECK_S = 5.0
#: How often ``watch`` reads a job that is running (its progress moves).
WATCH_PROGRESS_S = 0.5
#: Fields that move with the clock alone: a job whose other fields stand
#: still has not changed (``watch`` yields only changes).
VOLATILE_FIELDS = frozenset(
    {"elapsed_s", "queue_wait_s", "remaining_s", "eta_s", "eta_ts", "worker_silent_s"}
)


def wait(
    project: ProjectLike,
    job_id: str,
    *,
    timeout: float | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Job:
    """The job once it has ended (succeeded, failed or cancelled). Raises
    ``TimeoutError`` when it has not ended within ``timeout`` seconds, and
    ``InvalidValue`` when the project has no such job."""
    for job in _followed(project, job_id, timeout, config, every=RECHECK_S):
        if job.is_terminal:
            return job
    raise AssertionError("unreachable: _followed ends only at a terminal job")


def watch(
    project: ProjectLike,
    job_id: str,
    *,
    timeout: float | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Iterator[Job]:
    """The job now, then again each time it changes, until (and including) the
    state it ends in. Raises ``TimeoutError`` when it has not ended within
    ``timeout`` seconds, and ``InvalidValue`` when the project has no such job."""
    last: dict[str, Any] | None = None
    for job in _followed(project, job_id, timeout, config, every=WATCH_PROGRESS_S):
        seen = what_changes(job)
        if seen != last or job.is_terminal:
            last = seen
            yield job


def what_changes(job: Job) -> dict[str, Any]:
    """The job as ``watch`` compares it: its JSON without the fields that move
    with the clock alone."""
    return {k: v for k, v in to_dict(job).items() if k not in VOLATILE_FIELDS}


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` as seconds (None: no limit); refuses what is not a number >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidType(f"timeout must be a number of seconds or None, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise InvalidValue(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


def store_of(project: ProjectLike, job_id: str, config: JobsConfig) -> JobStore:
    """The store a job lives in (this process's handle), or ``InvalidValue``."""
    store, _ = reader(as_project(project), config)
    if store is None:
        raise InvalidValue(f"no job {job_id!r} in this project (it has no jobs)")
    return store


def current(project: ProjectLike, job_id: str, config: JobsConfig) -> Job:
    job = get_job(project, job_id, config=config)
    if job is None:
        raise InvalidValue(f"no job {job_id!r} in this project")
    return job


def _followed(
    project: ProjectLike, job_id: str, timeout: float | None, config: JobsConfig, *, every: float
) -> Iterator[Job]:
    """The job, read on subscribing and then on each signal (or ``every``
    seconds at the most while it runs, ``RECHECK_S`` otherwise), until it ends."""
    limit = check_timeout(timeout)
    deadline = None if limit is None else time.monotonic() + limit
    signal = threading.Event()
    unsubscribe: Callable[[], None] = store_of(project, job_id, config).subscribe(signal.set)
    try:
        while True:
            signal.clear()  # before the read: a change after it is not lost
            job = current(project, job_id, config)
            yield job
            if job.is_terminal:
                return
            signal.wait(pause_after(job, limit, deadline, every))
    finally:
        unsubscribe()


def pause_after(job: Job, limit: float | None, deadline: float | None, every: float) -> float:
    """How long a follower of an unfinished ``job`` sleeps before reading it
    again (a signal may wake it first): ``every`` while it runs, ``RECHECK_S``
    otherwise, never past the deadline; ``TimeoutError`` once that has passed."""
    left = math.inf if deadline is None else deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"job {job.job_id} had not ended after {limit:g} s")
    return min(left, every if job.status.value in ("running", "cancelling") else RECHECK_S)
