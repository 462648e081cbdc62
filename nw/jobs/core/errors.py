"""The job API's exceptions: the tree under ``NwJobsError`` (defined in
``nw.errors``, re-exported here) and which ``error_kind`` a job's exception is.

``InvalidInput`` and its kinds are the caller's to fix, ``BudgetExceeded``
needs an approval, ``JobStoreError`` the store's, ``ConfigError`` the
operator's; ``JobRefused`` and ``JobCancelled`` are what a body raises to say
how it ended. See ``nw.errors`` for the whole tree.
"""

from __future__ import annotations

from nw.errors import (
    ApprovalRequired,
    BudgetExceeded,
    ConfigError,
    InvalidInput,
    InvalidJobId,
    InvalidSetting,
    InvalidType,
    InvalidValue,
    JobCancelled,
    JobRefused,
    JobStoreError,
    JobStoreUnreachable,
    KindImportError,
    NonCanonicalPlan,
    NwJobsError,
    PlanError,
    ProjectError,
    RateTableError,
    UnknownKind,
    Unpriceable,
)
from nw.jobs.core.model import ERROR_KIND_CANCELLED, ERROR_KIND_CRASHED, ERROR_KIND_REFUSED

__all__ = [
    "ApprovalRequired",
    "BudgetExceeded",
    "ConfigError",
    "InvalidInput",
    "InvalidJobId",
    "InvalidSetting",
    "InvalidType",
    "InvalidValue",
    "JobCancelled",
    "JobRefused",
    "JobStoreError",
    "JobStoreUnreachable",
    "KindImportError",
    "NonCanonicalPlan",
    "NwJobsError",
    "PlanError",
    "ProjectError",
    "RateTableError",
    "UnknownKind",
    "Unpriceable",
    "error_kind_of",
]


def error_kind_of(error: BaseException) -> str:
    """``refused`` | ``cancelled`` | ``crashed`` for an exception a job raised.

    Examples:
        >>> [error_kind_of(e) for e in (JobRefused("no song"), JobCancelled(), ValueError())]
        ['refused', 'cancelled', 'crashed']
    """
    if isinstance(error, JobRefused):
        return ERROR_KIND_REFUSED
    if isinstance(error, JobCancelled):
        return ERROR_KIND_CANCELLED
    return ERROR_KIND_CRASHED
