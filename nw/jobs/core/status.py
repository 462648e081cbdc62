"""Status normalization and outcome grading: pure decisions, one place each.

The au store is the source of truth for the run's own status; the index's
``cancel_requested`` flag is the authority for cancellation intent. A job with
the flag reads ``cancelling`` until its body has stopped (``finished_at``) and
``cancelled`` after, whatever the body's thread wrote last. Stores that filter
by status in SQL mirror ``job_status`` (the contract suite checks they agree).
"""

from __future__ import annotations

from typing import Any

from nw.jobs.core.model import (
    CANCELLED,
    CANCELLING,
    ERROR_KIND_CANCELLED,
    ERROR_KIND_REFUSED,
    FAILED,
    QUEUED,
    REAPED_REASON,
    RUNNING,
    SUCCEEDED,
    Status,
)

_FROM_AU = {
    "pending": QUEUED,
    "running": RUNNING,
    "completed": SUCCEEDED,
    "failed": FAILED,
    "cancelled": CANCELLED,
}


def job_status(au_status: str, *, cancel_requested: bool, finished: bool) -> Status:
    """The job's status from the au status and the cancel intent."""
    if cancel_requested:
        return CANCELLED if finished else CANCELLING
    try:
        return _FROM_AU[au_status]
    except KeyError:
        raise ValueError(f"unknown au status {au_status!r}") from None


CANCELLED_BEFORE_START = {"error": "cancelled before start", "error_kind": ERROR_KIND_CANCELLED}
"""What a queued job's record says when a cancel ends it (it never ran)."""

CANCELLED_AFTER_RETURN = "cancelled on request; the body had already finished its work"


def cancelled_error(
    status: Status, error: str | None, error_kind: str | None
) -> tuple[str | None, str | None]:
    """(error, error_kind) as a job reads: every cancelled job has error_kind
    ``cancelled`` (the seed). The outcome policy writes it whenever the attempt
    knew of the request; a request that landed after the attempt's last look
    (its body returned and the success was written without another read, which
    would cost every job a round trip) is read here, from the same flag that
    makes the status cancelled."""
    if status != CANCELLED or error_kind == ERROR_KIND_CANCELLED:
        return error, error_kind
    return (f"cancelled on request; {error}" if error else CANCELLED_AFTER_RETURN), (
        ERROR_KIND_CANCELLED
    )


def grade(status: Status, *, error: str | None, error_kind: str | None, result: Any) -> str | None:
    """Severity of a finished job: ``ok`` / ``notice`` / ``warning`` / ``error``.

    Cancelled by a person is a notice; a refusal (the body said no, with a
    reason for the person) is a warning; a crash or a reaped worker is an
    error; a success with an empty result is a warning. None while live.
    """
    if status == SUCCEEDED:
        return "warning" if _is_empty(result) else "ok"
    if status == CANCELLED:
        return "error" if (error or "").startswith(REAPED_REASON) else "notice"
    if status == FAILED:
        return "warning" if error_kind == ERROR_KIND_REFUSED else "error"
    return None


def _is_empty(result: Any) -> bool:
    return result is None or (hasattr(result, "__len__") and len(result) == 0)
