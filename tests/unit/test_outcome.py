"""The outcome and retry policy, pure: no store, no thread, no clock but the one given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from au import ComputationStatus

from nw.jobs.core.model import REAPED_REASON, JobsConfig
from nw.jobs.core.outcome import Ended, Ending, RetryPolicy, backoff_delay, decide
from nw.jobs.core.records import attempt_in_run

NOW = 1_700_000_000.0
RETRY3 = RetryPolicy(retryable=True, max_attempts=3, backoff_s=2.0)
NEVER = RetryPolicy(retryable=False, max_attempts=1, backoff_s=2.0)


def rec(attempt=1, base=0, **extra):
    return {"job_id": "j", "attempt": attempt, "attempt_base": base, **extra}


def crash(how=Ended.RAISED, message="RuntimeError: boom", at=NOW):
    return Ending(how, at, error_kind="crashed", message=message)


# ----- backoff ------------------------------------------------------------------------
@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 2.0), (2, 4.0), (3, 8.0)])
def test_the_backoff_doubles_per_attempt_and_is_jittered_in_its_upper_half(attempt, ceiling):
    assert backoff_delay(attempt, 2.0, 0.0) == ceiling / 2
    assert backoff_delay(attempt, 2.0, 0.5) == pytest.approx(0.75 * ceiling)
    assert backoff_delay(attempt, 2.0, 0.999999) == pytest.approx(ceiling)


def test_a_retried_crash_is_due_after_its_backoff_not_at_once():
    out = decide(crash(), rec(attempt=2), RETRY3, now=NOW, cancel_requested=False, rand=lambda: 0)
    assert out.requeued and out.au_status is ComputationStatus.PENDING
    assert out.due_at == NOW + backoff_delay(2, 2.0, 0.0) == NOW + 2.0


def test_the_policy_takes_its_backoff_from_the_config_and_its_budget_from_the_record():
    policy = RetryPolicy.of({"retryable": True, "max_attempts": 4}, JobsConfig(retry_backoff_s=0.5))
    assert policy == RetryPolicy(retryable=True, max_attempts=4, backoff_s=0.5)
    # a record without the fields (an older row): one attempt, never retried
    assert RetryPolicy.of({}, JobsConfig()) == RetryPolicy(False, 1, JobsConfig().retry_backoff_s)


def spec(retryable=False, max_attempts=None):
    return SimpleNamespace(retryable=retryable, max_attempts=max_attempts)


@pytest.mark.parametrize(
    ("registered", "record", "policy"),
    [
        (spec(True, 4), None, (True, 4)),  # the kind's own budget
        (spec(True), None, (True, 3)),  # a retryable kind without one: the config's
        (spec(False), None, (False, 1)),  # not retried: one attempt, whatever the config
        (None, None, (False, 1)),  # an in-process body, or no registration at all
        (None, {"retryable": True, "max_attempts": 5}, (True, 5)),  # what the run was given
        (spec(True, 2), {"retryable": False, "max_attempts": 1}, (True, 2)),  # registered wins
    ],
)
def test_a_new_run_resolves_its_policy_from_the_kind_else_from_the_earlier_run(
    registered, record, policy
):
    config = JobsConfig(max_attempts=3, retry_backoff_s=0.5)
    resolved = RetryPolicy.resolve(registered, config, record=record)
    assert (resolved.retryable, resolved.max_attempts) == policy and resolved.backoff_s == 0.5


# ----- a body's endings ---------------------------------------------------------------
def test_a_body_that_returned_succeeds_with_its_result_fields():
    ending = Ending(Ended.RETURNED, NOW, fields={"artifact_ref": "a1", "actual_usd": 0.2})
    out = decide(ending, rec(), RETRY3, now=NOW, cancel_requested=False)
    assert out.au_status is ComputationStatus.COMPLETED and not out.requeued
    assert out.fields == {
        "artifact_ref": "a1",
        "actual_usd": 0.2,
        "finished_at": NOW,
        "error": None,
        "error_kind": None,
    }


def test_a_crash_with_attempts_left_is_requeued_keeping_what_the_attempt_spent():
    out = decide(crash(), rec(attempt=1, actual_usd=0.3), RETRY3, now=NOW, cancel_requested=False)
    assert out.requeued
    assert out.fields["error"] == "RuntimeError: boom" and out.fields["error_kind"] == "crashed"
    assert out.fields["prior_actual_usd"] == 0.3 and out.fields["actual_usd"] is None
    assert "finished_at" not in out.fields
    assert "retrying as attempt 2" in out.note


def test_a_crash_on_the_last_attempt_fails():
    out = decide(crash(), rec(attempt=3), RETRY3, now=NOW, cancel_requested=False)
    assert out.au_status is ComputationStatus.FAILED and not out.requeued
    assert out.error == out.fields["error"] == "RuntimeError: boom"
    assert out.fields["finished_at"] == NOW


def test_attempts_count_within_the_run_not_the_lease_counter():
    # lease 7 of a job re-run from lease 5 is the run's 2nd attempt: one left of 3
    out = decide(crash(), rec(attempt=7, base=5), RETRY3, now=NOW, cancel_requested=False)
    assert out.requeued and "retrying as attempt 3" in out.note


def test_a_crash_of_a_kind_that_is_not_retryable_fails():
    out = decide(crash(), rec(), NEVER, now=NOW, cancel_requested=False)
    assert out.au_status is ComputationStatus.FAILED and out.fields["error_kind"] == "crashed"


def test_a_refusal_fails_and_is_never_retried_even_when_the_worker_is_stopping():
    for how in (Ended.RAISED, Ended.STOPPED):
        ending = Ending(how, NOW, "refused", "no song", fields={"error_detail": {"why": 1}})
        out = decide(ending, rec(), RETRY3, now=NOW, cancel_requested=False)
        assert out.au_status is ComputationStatus.FAILED and not out.requeued
        assert out.fields["error_kind"] == "refused" and out.fields["error"] == "no song"
        assert out.fields["error_detail"] == {"why": 1}


def test_a_body_that_raised_the_cancel_exception_on_its_own_ends_cancelled():
    ending = Ending(Ended.RAISED, NOW, "cancelled", "stopped at a boundary")
    out = decide(ending, rec(), RETRY3, now=NOW, cancel_requested=False)
    assert out.au_status is ComputationStatus.CANCELLED
    assert out.fields["error_kind"] == "cancelled"
    assert out.fields["error"] == "stopped at a boundary"


# ----- a cancel request wins ----------------------------------------------------------
@pytest.mark.parametrize(
    ("ending", "says"),
    [
        (Ending(Ended.RETURNED, NOW, fields={"artifact_ref": "a"}), "already finished its work"),
        (Ending(Ended.RAISED, NOW, "cancelled", "stopped at a boundary"), "stopped at a boundary"),
        (Ending(Ended.RAISED, NOW, "crashed", "ValueError: x"), "then failed: ValueError: x"),
        (Ending(Ended.RAISED, NOW, "refused", "no song"), "then failed: no song"),
        (Ending(Ended.STOPPED, NOW, "cancelled", "stopped"), "its worker shut down"),
        (Ending(Ended.LOST, NOW - 30), f"{REAPED_REASON} before the body stopped"),
    ],
)
def test_every_ending_after_a_cancel_request_is_cancelled_and_says_how(ending, says):
    out = decide(ending, rec(), RETRY3, now=NOW, cancel_requested=True)
    assert not out.requeued
    assert out.fields["error_kind"] == "cancelled"
    assert out.fields["error"].startswith("cancelled on request") or out.fields["error"].startswith(
        REAPED_REASON
    )
    assert says in out.fields["error"]
    assert out.fields["finished_at"] == ending.at
    # a body that returned keeps its (paid for) result; the flag makes it read cancelled
    returned = ending.how is Ended.RETURNED
    assert out.au_status is (
        ComputationStatus.COMPLETED if returned else ComputationStatus.CANCELLED
    )


# ----- a graceful stop ----------------------------------------------------------------
def test_a_graceful_stop_requeues_at_once_and_gives_its_attempt_back():
    record = rec(attempt=4, base=2, actual_usd=0.1)  # the run's 2nd attempt
    ending = Ending(Ended.STOPPED, NOW, "cancelled", "stopped at a boundary")
    out = decide(ending, record, RETRY3, now=NOW, cancel_requested=False)
    assert out.requeued and out.due_at == NOW
    assert out.fields["error"] is None and out.fields["error_kind"] is None
    assert out.fields["prior_actual_usd"] == 0.1
    # the next claim bumps the lease counter; the attempt within the run stays 2
    reclaimed = {**record, **out.fields, "attempt": record["attempt"] + 1}
    assert attempt_in_run(reclaimed) == attempt_in_run(record) == 2


def test_a_job_a_lost_claim_took_goes_back_with_its_attempt_and_says_it_never_ran():
    record = rec(attempt=3, base=1)  # the run's 2nd attempt, claimed blind
    out = decide(Ending(Ended.UNSTARTED, NOW), record, NEVER, now=NOW, cancel_requested=False)
    assert out.requeued and out.due_at == NOW and out.fields["error"] is None
    assert "never ran" in out.note and "stopping" not in out.note
    reclaimed = {**record, **out.fields, "attempt": record["attempt"] + 1}
    assert attempt_in_run(reclaimed) == attempt_in_run(record) == 2
    cancelled = decide(Ending(Ended.UNSTARTED, NOW), record, NEVER, now=NOW, cancel_requested=True)
    assert cancelled.au_status is ComputationStatus.CANCELLED
    assert cancelled.fields["error"] == "cancelled on request before it started"


def test_a_graceful_stop_is_not_a_failure_even_for_a_kind_that_is_never_retried():
    ending = Ending(Ended.STOPPED, NOW)  # still running when the grace ran out
    out = decide(ending, rec(), NEVER, now=NOW, cancel_requested=False)
    assert out.requeued and out.fields["error"] is None


# ----- a lost worker ------------------------------------------------------------------
LAST_BEAT = NOW - 100.0


def test_a_lost_worker_with_attempts_left_says_which_attempt_comes_next():
    out = decide(
        Ending(Ended.LOST, LAST_BEAT), rec(attempt=1), RETRY3, now=NOW, cancel_requested=False,
        rand=lambda: 0,
    )  # fmt: skip
    assert out.requeued and out.due_at == NOW  # no backoff: the loss says nothing of the job
    assert out.fields["error"] == "worker lost; retrying as attempt 2"
    assert out.fields["error_kind"] == "crashed"


@pytest.mark.parametrize(
    ("policy", "attempt", "says"),
    [
        (RETRY3, 3, "worker lost; no attempts left"),
        (NEVER, 1, "worker lost; its kind is not retried"),
    ],
)
def test_a_lost_worker_without_a_retry_fails_at_its_last_sign_of_life(policy, attempt, says):
    out = decide(
        Ending(Ended.LOST, LAST_BEAT), rec(attempt), policy, now=NOW, cancel_requested=False
    )
    assert out.au_status is ComputationStatus.FAILED
    assert out.fields["error"] == out.error == says
    assert out.fields["finished_at"] == LAST_BEAT  # the duration runs to the last beat


def test_a_job_queued_by_a_process_that_is_gone_fails_saying_it_never_ran():
    out = decide(Ending(Ended.ORPHANED, NOW - 5), rec(attempt=0), RETRY3, now=NOW,
                 cancel_requested=False)  # fmt: skip
    assert out.au_status is ComputationStatus.FAILED and not out.requeued
    assert out.fields["error"].startswith(f"{REAPED_REASON} before it started")


# ----- a launch that failed ----------------------------------------------------------
def unlaunched(message="kind 'k' is registered to 'gone:f', which does not import"):
    return Ending(Ended.UNLAUNCHED, NOW, error_kind="crashed", message=message)


def test_a_failed_launch_of_a_kind_not_retried_fails_as_a_crash_with_its_reason():
    out = decide(unlaunched(), rec(), NEVER, now=NOW, cancel_requested=False)
    assert out.au_status is ComputationStatus.FAILED and not out.requeued
    assert out.fields["error_kind"] == "crashed" and "'gone:f'" in out.fields["error"]
    assert out.error == out.fields["error"] and out.fields["finished_at"] == NOW


def test_a_failed_launch_spends_its_attempt_and_is_retried_after_the_backoff():
    record = rec(attempt=3, base=1)  # the run's 2nd attempt of 3
    out = decide(unlaunched(), record, RETRY3, now=NOW, cancel_requested=False, rand=lambda: 0)
    assert out.requeued and out.due_at == NOW + backoff_delay(2, 2.0, 0.0)
    assert "attempt_base" not in out.fields  # spent, not given back as a stop's is
    assert out.fields["error_kind"] == "crashed" and "'gone:f'" in out.fields["error"]
    last = decide(unlaunched(), rec(attempt=4, base=1), RETRY3, now=NOW, cancel_requested=False)
    assert last.au_status is ComputationStatus.FAILED  # the 3rd attempt was the last


def test_a_failed_launch_after_a_cancel_request_is_cancelled_and_says_both():
    out = decide(unlaunched(), rec(), RETRY3, now=NOW, cancel_requested=True)
    assert out.au_status is ComputationStatus.CANCELLED and not out.requeued
    assert out.fields["error_kind"] == "cancelled"
    assert out.fields["error"].startswith("cancelled on request before it started")
    assert "'gone:f'" in out.fields["error"] and out.ended == "cancelled"


# ----- the attempt's entry in Job.attempts --------------------------------------------
def _open(lease=1):
    return {
        "attempt": 1,
        "lease": lease,
        "runner_id": "w",
        "host": "h",
        "pid": 7,
        "started_at": NOW - 5,
    }


@pytest.mark.parametrize(
    ("ending", "policy", "cancel", "word"),
    [
        (Ending(Ended.RETURNED, NOW), RETRY3, False, "succeeded"),
        (Ending(Ended.RETURNED, NOW), RETRY3, True, "cancelled"),
        (crash(), RETRY3, False, "requeued"),
        (crash(), NEVER, False, "failed"),
        (Ending(Ended.RAISED, NOW, error_kind="refused", message="no"), RETRY3, False, "failed"),
        (Ending(Ended.RAISED, NOW, error_kind="cancelled"), RETRY3, False, "cancelled"),
        (Ending(Ended.STOPPED, NOW), RETRY3, False, "stopped"),
        (Ending(Ended.UNSTARTED, NOW), NEVER, False, "not started"),
        (Ending(Ended.UNSTARTED, NOW), RETRY3, True, "cancelled"),
        (unlaunched(), NEVER, False, "failed"),
        (unlaunched(), RETRY3, False, "requeued"),
        (unlaunched(), RETRY3, True, "cancelled"),
        (Ending(Ended.LOST, NOW - 2), RETRY3, False, "worker lost"),
        (Ending(Ended.LOST, NOW - 2), NEVER, True, "worker lost"),
    ],
)
def test_the_outcome_closes_the_attempt_saying_why_it_ended(ending, policy, cancel, word):
    record = rec(attempts=[{**_open(), "ended": "failed", "lease": 0}, _open()])
    out = decide(ending, record, policy, now=NOW, cancel_requested=cancel, rand=lambda: 0)
    first, last = out.fields["attempts"]
    assert first == record["attempts"][0]  # earlier attempts are left as they were
    error = out.fields.get("error") or out.error
    if error is not None and error.startswith(word):  # not the word twice
        error = error[len(word) :].lstrip(" ;:") or None
    assert last == {**_open(), "ended": word, "ended_at": ending.at, "error": error}


def test_a_lost_attempt_s_error_does_not_repeat_how_it_ended():
    record = rec(attempts=[_open()])
    out = decide(Ending(Ended.LOST, NOW - 2), record, RETRY3, now=NOW, cancel_requested=False)
    assert out.fields["error"] == "worker lost; retrying as attempt 2"  # the job's
    (closed,) = out.fields["attempts"]
    assert (closed["ended"], closed["error"]) == ("worker lost", "retrying as attempt 2")


def test_no_entry_is_closed_that_is_not_the_current_attempts():
    stale = rec(attempt=2, attempts=[_open(lease=1)])  # its claim was not recorded
    assert "attempts" not in decide(crash(), stale, NEVER, now=NOW, cancel_requested=False).fields
    assert "attempts" not in decide(crash(), rec(), NEVER, now=NOW, cancel_requested=False).fields


# ----- what a requeued or finished job's progress reads ------------------------------
def test_a_requeued_job_reads_its_progress_from_zero_and_keeps_what_it_spent():
    # Given an attempt lost at "download", 3 of 4 stages done, having spent $0.40
    lost_at = rec(
        attempt=1, stage_index=3, stage_count=4, current_transform="download", fraction=0.5,
        pct_floor=70.0, actual_usd=0.4,
    )  # fmt: skip
    out = decide(
        Ending(Ended.LOST, LAST_BEAT), lost_at, RETRY3, now=NOW, cancel_requested=False,
        rand=lambda: 0,
    )  # fmt: skip
    # Then the queued job says nothing of that attempt's stages, and its spend is carried
    assert out.requeued
    for name in ("stage_index", "stage_count", "current_transform", "fraction", "pct_floor"):
        assert name in out.fields and out.fields[name] is None
    assert out.fields["prior_actual_usd"] == 0.4 and out.fields["actual_usd"] is None


def test_a_success_reads_every_declared_stage_done():
    # Given a body that began its 4th and last stage (index 3) and returned
    ran = rec(attempt=1, stage_index=3, stage_count=4, current_transform="download")
    out = decide(Ending(Ended.RETURNED, NOW), ran, RETRY3, now=NOW, cancel_requested=False)
    assert out.fields["stage_index"] == 4  # "4 of 4 done", not "3 of 4"
    # and a body that declared no stages gets none
    plain = decide(Ending(Ended.RETURNED, NOW), rec(), RETRY3, now=NOW, cancel_requested=False)
    assert "stage_index" not in plain.fields


def test_a_requeued_job_s_queue_wait_counts_from_its_requeue_not_its_creation():
    from nw.jobs.core.records import JobRow, to_job

    # Given a job created at T, whose first attempt ran 10 s and was lost at T+11,
    # and whose second attempt started at T+14
    t = NOW - 60
    record = rec(
        attempt=2, created_at=t, started_at=t + 14,
        attempts=[
            {"attempt": 1, "lease": 1, "started_at": t + 1, "ended_at": t + 11, "ended": "lost"},
            {"attempt": 2, "lease": 2, "started_at": t + 14},
        ],
    )  # fmt: skip
    job = to_job(JobRow(record, "running"), NOW, JobsConfig())
    assert job.queue_wait_s == 3.0  # not 14: the first run is not waiting
    # and a job that never ran waited since its creation
    fresh = to_job(JobRow(rec(created_at=t, started_at=t + 2), "running"), NOW, JobsConfig())
    assert fresh.queue_wait_s == 2.0
