"""nw.jobs: durable, cancellable, cost-aware render jobs for a project.

The public surface is exactly ``__all__`` (pinned by a test).
"""

import typing as _typing
from importlib import import_module as _import_module

from nw.jobs.core.errors import (
    ApprovalRequired,
    BudgetExceeded,
    ConfigError,
    InvalidInput,
    InvalidJobId,
    JobCancelled,
    JobRefused,
    JobStoreError,
    KindImportError,
    NwJobsError,
    UnknownKind,
    error_kind_of,
)
from nw.jobs.core.eta import predict_total_s
from nw.jobs.core.kinds import register_kind
from nw.jobs.core.model import (
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
from nw.jobs.core.parked import Pending, Submitted
from nw.jobs.core.pipelines import Pipeline, PipelineStep
from nw.jobs.core.records import to_dict
from nw.jobs.execution.learning import DurationLearningMiddleware

# The facade and the console (and what only they need: pricing, plans, the
# cost gate, the operator's reads) are imported on first use of one of their
# names, so a worker process, which runs bodies and calls neither, starts
# without them: a public name not imported above is the console's if listed
# here, else the facade's.
_CONSOLE = frozenset({"prune", "retry_job", "retry_jobs", "totals", "workers"})
_PIPELINES = frozenset(
    {"cancel_pipeline", "enqueue_pipeline", "estimate_pipeline", "get_pipeline", "retry_pipeline"}
)

if _typing.TYPE_CHECKING:  # what a type checker sees of the names imported on first use
    from nw.jobs.api.console import prune, retry_job, retry_jobs, totals, workers
    from nw.jobs.api.facade import (
        cancel_job,
        cost_accuracy,
        enqueue,
        enqueue_many,
        estimate,
        get_approval,
        get_job,
        get_job_progress,
        list_budgets,
        list_jobs,
        list_limits,
        remove_budget,
        set_approval,
        set_budget,
        set_limit,
        snapshot,
        spend,
        summarize,
        wait,
        watch,
    )
    from nw.jobs.api.pipeline_retry import retry_pipeline
    from nw.jobs.api.pipelines import (
        cancel_pipeline,
        enqueue_pipeline,
        estimate_pipeline,
        get_pipeline,
    )


def __getattr__(name: str) -> object:
    if name in __all__:
        module = "nw.jobs.api.console" if name in _CONSOLE else "nw.jobs.api.facade"
        if name in _PIPELINES:
            module = (
                "nw.jobs.api.pipeline_retry"
                if name == "retry_pipeline"
                else "nw.jobs.api.pipelines"
            )
        value = getattr(_import_module(module), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nw.jobs' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazily imported names are public too: tab completion and help() list them.
    return sorted(set(globals()) | set(__all__))


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
    "ApprovalRequired",
    "BudgetExceeded",
    "ConfigError",
    "DurationLearningMiddleware",
    "InvalidInput",
    "InvalidJobId",
    "Job",
    "JobCancelled",
    "JobCost",
    "JobProgress",
    "JobRefused",
    "JobStoreError",
    "JobsConfig",
    "KindImportError",
    "NwJobsError",
    "Pending",
    "Pipeline",
    "PipelineStep",
    "Status",
    "Submitted",
    "UnknownKind",
    "cancel_job",
    "cancel_pipeline",
    "cost_accuracy",
    "enqueue",
    "enqueue_many",
    "enqueue_pipeline",
    "error_kind_of",
    "estimate",
    "estimate_pipeline",
    "get_approval",
    "get_job",
    "get_job_progress",
    "get_pipeline",
    "list_budgets",
    "list_jobs",
    "list_limits",
    "predict_total_s",
    "prune",
    "register_kind",
    "remove_budget",
    "retry_job",
    "retry_jobs",
    "retry_pipeline",
    "set_approval",
    "set_budget",
    "set_limit",
    "snapshot",
    "spend",
    "summarize",
    "to_dict",
    "totals",
    "wait",
    "watch",
    "workers",
]
