"""The public facade: validate, ask the pure core, read or write the store, project.

Write paths (``enqueue``, ``cancel_job``) open the project's store and, for
in-process bodies, its runtime. Read paths open the store only if it exists
and never start a runtime; ``summarize`` and ``snapshot`` open it read-only
and write nothing at all (no reap, no progress floor).
"""

from __future__ import annotations

from nw.jobs.api.accuracy import cost_accuracy
from nw.jobs.api.budgets import get_approval, list_budgets, remove_budget, set_approval, set_budget
from nw.jobs.api.enqueueing import enqueue, enqueue_many
from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.api.limit_settings import list_limits, set_limit
from nw.jobs.api.reads import (
    cursor_of,
    get_job,
    get_job_progress,
    list_jobs,
    snapshot,
    stores_to_reap,
    summarize,
    worker_seen,
)
from nw.jobs.api.spending import estimate, spend
from nw.jobs.api.waiting import wait, watch
from nw.jobs.core.checks import GRADES, could_name_a_job
from nw.jobs.core.model import DEFAULT_CONFIG, Job, JobsConfig
from nw.jobs.core.records import to_job
from nw.project import as_project

__all__ = [
    "GRADES",
    "ProjectLike",
    "cancel_job",
    "cost_accuracy",
    "cursor_of",
    "enqueue",
    "enqueue_many",
    "estimate",
    "get_approval",
    "get_job",
    "get_job_progress",
    "list_budgets",
    "list_jobs",
    "list_limits",
    "remove_budget",
    "set_approval",
    "set_budget",
    "set_limit",
    "snapshot",
    "spend",
    "stores_to_reap",
    "summarize",
    "wait",
    "watch",
]


def cancel_job(
    project: ProjectLike, job_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> Job | None:
    """Request cancellation; idempotent; None if unknown; a finished job is untouched."""
    if not could_name_a_job(job_id):
        return None
    proj = as_project(project)
    store, rt = reader(proj, config)
    if store is None:
        return None
    row = store.request_cancel(job_id, now=config.clock())
    if row is None:
        return None
    if rt is not None:
        rt.local_cancel(job_id)
    return to_job(row, config.clock(), config, worker_seen(store, row))
