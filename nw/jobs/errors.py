"""Exceptions a body raises to say how it ended, and those the facade raises."""

from __future__ import annotations

from typing import Any

from nw.jobs.model import ERROR_KIND_CANCELLED, ERROR_KIND_CRASHED, ERROR_KIND_REFUSED


class JobRefused(Exception):
    """A body declines the work with a message for the person (not a bug)."""

    def __init__(self, message: str, *, detail: Any = None):
        super().__init__(message)
        self.detail = detail


class JobCancelled(Exception):
    """A body stopped at a boundary because ``should_cancel()`` turned true."""


class JobStoreError(RuntimeError):
    """The job store cannot be read or written (corrupt file, lost database)."""


class JobStoreUnreachable(JobStoreError):
    """The job store's database could not be reached (connection lost, retries spent)."""


class BudgetExceeded(Exception):
    """``enqueue`` refused a job the project's spend cap does not allow; nothing
    was written. The message names the cap, the committed spend and the quote."""

    def __init__(
        self,
        *,
        cap_usd: float,
        committed_usd: float,
        quote_usd: float | None,
        committed_is_lower_bound: bool = False,
        needs_approval: bool = False,
    ):
        self.cap_usd = cap_usd
        self.committed_usd = committed_usd
        self.quote_usd = quote_usd
        self.committed_is_lower_bound = committed_is_lower_bound
        self.needs_approval = needs_approval
        at_least = "at least " if committed_is_lower_bound else ""
        committed = f"{at_least}{_money(committed_usd)} is committed (spent plus live estimates)"
        if quote_usd is not None:
            why = f"this job's quote of {_money(quote_usd)} would take it past the cap"
        elif needs_approval:
            why = "this job's cost is unknown, so it needs explicit approval (approved=True)"
        else:
            why = "nothing is left under the cap for a job whose cost is unknown"
        super().__init__(f"spend cap {_money(cap_usd)}: {committed}; {why}")


def _money(usd: float) -> str:
    """Cents, unless that would hide a sub-cent figure."""
    return f"${usd:.2f}" if abs(round(usd, 2) - usd) < 1e-9 else f"${usd:.6g}"


def error_kind_of(error: BaseException) -> str:
    """``refused`` | ``cancelled`` | ``crashed`` for an exception a job raised.

    >>> [error_kind_of(e) for e in (JobRefused("no song"), JobCancelled(), ValueError())]
    ['refused', 'cancelled', 'crashed']
    """
    if isinstance(error, JobRefused):
        return ERROR_KIND_REFUSED
    if isinstance(error, JobCancelled):
        return ERROR_KIND_CANCELLED
    return ERROR_KIND_CRASHED
