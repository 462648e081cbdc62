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


class StaleLease(JobStoreError):
    """A write carried an attempt token that is no longer current: refused."""


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
