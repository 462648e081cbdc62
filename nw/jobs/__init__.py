"""nw.jobs: durable, cancellable, cost-aware render jobs for a project.

The public surface is exactly ``__all__`` (pinned by a test).
"""

from nw.jobs.errors import (
    BudgetExceeded,
    JobCancelled,
    JobRefused,
    JobStoreError,
    error_kind_of,
)
from nw.jobs.eta import predict_total_s
from nw.jobs.facade import (
    cancel_job,
    enqueue,
    estimate,
    get_job,
    get_job_progress,
    list_jobs,
    snapshot,
    spend,
    summarize,
)
from nw.jobs.ids import InvalidJobId
from nw.jobs.kinds import KindImportError, register_kind
from nw.jobs.learning import DurationLearningMiddleware
from nw.jobs.model import (
    CANCELLED,
    CANCELLING,
    DEFAULT_CONFIG,
    ERROR_KIND_CANCELLED,
    ERROR_KIND_CRASHED,
    ERROR_KIND_REFUSED,
    FAILED,
    QUEUED,
    REAPED_REASON,
    RUNNING,
    SUCCEEDED,
    TERMINAL_STATUSES,
    UNREADABLE_PLAN_REASON,
    Job,
    JobCost,
    JobProgress,
    JobsConfig,
    Status,
)
from nw.jobs.records import to_dict

__all__ = [
    "CANCELLED",
    "CANCELLING",
    "DEFAULT_CONFIG",
    "ERROR_KIND_CANCELLED",
    "ERROR_KIND_CRASHED",
    "ERROR_KIND_REFUSED",
    "FAILED",
    "QUEUED",
    "REAPED_REASON",
    "RUNNING",
    "SUCCEEDED",
    "TERMINAL_STATUSES",
    "UNREADABLE_PLAN_REASON",
    "BudgetExceeded",
    "DurationLearningMiddleware",
    "InvalidJobId",
    "Job",
    "JobCancelled",
    "JobCost",
    "JobProgress",
    "JobRefused",
    "JobStoreError",
    "JobsConfig",
    "KindImportError",
    "Status",
    "cancel_job",
    "enqueue",
    "error_kind_of",
    "estimate",
    "get_job",
    "get_job_progress",
    "list_jobs",
    "predict_total_s",
    "register_kind",
    "snapshot",
    "spend",
    "summarize",
    "to_dict",
]
