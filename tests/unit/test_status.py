from __future__ import annotations

import pytest

from nw.jobs.core.model import REAPED_REASON, Status
from nw.jobs.core.status import CANCELLED_AFTER_RETURN, cancelled_error, grade, job_status


@pytest.mark.parametrize(
    ("au", "flag", "finished", "expected"),
    [
        ("pending", False, False, "queued"),
        ("running", False, False, "running"),
        ("completed", False, True, "succeeded"),
        ("failed", False, True, "failed"),
        ("cancelled", False, True, "cancelled"),
        ("cancelled", True, False, "cancelling"),
        ("completed", True, True, "cancelled"),
        ("running", True, False, "cancelling"),
        ("cancelled", True, True, "cancelled"),
    ],
)
def test_the_cancel_flag_is_the_authority_for_intent(au, flag, finished, expected):
    assert job_status(au, cancel_requested=flag, finished=finished) == expected


def test_an_unknown_au_status_is_an_error():
    with pytest.raises(ValueError):
        job_status("exploded", cancel_requested=False, finished=True)


@pytest.mark.parametrize(
    ("status", "error", "kind", "result", "expected"),
    [
        (Status.SUCCEEDED, None, None, {"url": "x"}, "ok"),
        (Status.SUCCEEDED, None, None, {}, "warning"),
        (Status.SUCCEEDED, None, None, None, "warning"),
        (Status.CANCELLED, "cancelled by user", "cancelled", None, "notice"),
        (Status.CANCELLED, f"{REAPED_REASON} before the body stopped", "cancelled", None, "error"),
        (Status.FAILED, "no song", "refused", None, "warning"),
        (Status.FAILED, "boom", "crashed", None, "error"),
        (Status.FAILED, f"{REAPED_REASON}; no attempts left", "crashed", None, "error"),
        (Status.RUNNING, None, None, None, None),
    ],
)
def test_grades(status, error, kind, result, expected):
    assert grade(status, error=error, error_kind=kind, result=result) == expected


@pytest.mark.parametrize(
    ("status", "error", "kind", "expected"),
    [
        (
            Status.CANCELLED,
            "stopped at a boundary",
            "cancelled",
            ("stopped at a boundary", "cancelled"),
        ),
        # the request landed after the body's success was written
        (Status.CANCELLED, None, None, (CANCELLED_AFTER_RETURN, "cancelled")),
        (
            Status.CANCELLED,
            "ValueError: x",
            "crashed",
            ("cancelled on request; ValueError: x", "cancelled"),
        ),
        (Status.FAILED, "ValueError: x", "crashed", ("ValueError: x", "crashed")),
        (Status.SUCCEEDED, None, None, (None, None)),
    ],
)
def test_every_cancelled_job_reads_error_kind_cancelled(status, error, kind, expected):
    assert cancelled_error(status, error, kind) == expected
