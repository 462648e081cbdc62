"""How an attempt ended, and what that makes of its job: the one outcome and retry policy.

``decide`` is pure: what ended (an ``Ending``), the job's record as the
attempt knew it, the kind's ``RetryPolicy``, whether a person asked to cancel,
and the clock -> an ``Outcome``: finish with an au status, or go back to the
queue due at a time, with the record fields to write either way. ``write`` is
the one place an outcome reaches a store (fenced by the attempt). The body
runner (a body returned or raised), the reaper (a worker stopped beating), a
stopping worker (SIGTERM) and a launch that failed (``end_unlaunched``: a
worker's, or an in-process enqueue's) only describe what happened; none of
them chooses between "retry" and "fail" itself, and no job ends another way.
A run's ``RetryPolicy`` is resolved once, when the run begins (``resolve``:
``enqueue``, ``retry_job``), and recorded with the job; every ending reads it
back from the record (``RetryPolicy.of``).

The rules, in the spirit of dramatiq's ``Retries`` middleware (a per-kind
attempt budget, exponential backoff with jitter, only some endings retried):

* A cancel request wins over everything: the job ends cancelled, and every
  cancelled job has ``error_kind == "cancelled"`` whatever its body did; its
  ``error`` says what happened.
* A refusal is the body's verdict: failed, never retried.
* A crash, a launch that failed, or a lost worker, is retried while the kind
  is retryable and the run has attempts left (``attempt_in_run <
  max_attempts``): a crash or a failed launch due after ``backoff_delay``, a
  lost worker's job at once (the loss says nothing against the job; the
  attempts bound a job that kills its worker); else it fails. A failed launch
  spends its attempt though no body ran: what fails a launch (a kind that does
  not import, a runtime shutting down) mostly fails the next one too, and an
  attempt given back would be claimed and fail again at once, for ever.
* A graceful stop (the worker is shutting down) is not a failure: the job goes
  back to the queue at once, and the attempt it was on is given back
  (``attempt_base`` moves up with the lease counter), so it is not consumed.
  So does a job a claim took whose answer was lost (it never ran).
* A lost worker's job ends at its last sign of life (its last heartbeat), not
  when someone noticed, so its duration is the time it really ran.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from au import ComputationStatus

from nw.jobs.core import events
from nw.jobs.core.model import (
    ACTIVE_STATUSES,
    ERROR_KIND_CANCELLED,
    ERROR_KIND_CRASHED,
    ERROR_KIND_REFUSED,
    REAPED_REASON,
    JobsConfig,
)
from nw.jobs.core.records import JobRow, attempt_in_run, max_attempts_of
from nw.jobs.core.status import CANCELLED_AFTER_RETURN
from nw.jobs.stores.roles import Running, Settling, settled

if TYPE_CHECKING:
    from nw.jobs.core.kinds import KindSpec


class Ended(StrEnum):
    """How an attempt stopped."""

    RETURNED = "returned"
    """The body returned a value."""
    RAISED = "raised"
    """The body raised (``Ending.error_kind`` says how: refused, cancelled, crashed)."""
    STOPPED = "stopped"
    """The worker is shutting down: the body stopped at a boundary, or was still
    running when the grace period ran out."""
    UNSTARTED = "unstarted"
    """Claimed and never launched: the claim committed but its answer was lost
    (the database went away), and the worker that took it gives it back."""
    LOST = "lost"
    """The worker stopped beating (found by the reaper)."""
    ORPHANED = "orphaned"
    """Queued for an in-process body whose process is gone: it never ran."""
    UNLAUNCHED = "unlaunched"
    """Its body could not be launched (``Ending.message`` says why: a kind that
    does not import or is not registered in the worker, a runtime that is
    shutting down): it never ran. A crash, as the retry policy reads it."""


@dataclass(frozen=True)
class Ending:
    """What the caller saw end. ``at``: when (the last sign of life for LOST)."""

    how: Ended
    at: float
    error_kind: str | None = None
    message: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    """What the attempt itself reports: the result's fields, a refusal's detail."""


@dataclass(frozen=True)
class RetryPolicy:
    """A kind's retry policy: may a crash be retried, how many attempts per run,
    and the base of the exponential backoff."""

    retryable: bool
    max_attempts: int
    backoff_s: float

    @classmethod
    def resolve(
        cls,
        spec: KindSpec | None,
        config: JobsConfig,
        *,
        record: Mapping[str, Any] | None = None,
    ) -> RetryPolicy:
        """The policy a new run of a job gets (``enqueue``, ``retry_job``), which
        is recorded with it: its kind's registration in this process (``spec``;
        a retryable kind without its own ``max_attempts`` gets
        ``config.max_attempts``, a kind not retried one attempt). Without a
        registration: what ``record`` (an earlier run) was given, else one
        attempt, never retried (an in-process body: a retry is claimed by a
        worker, and its callable lives only in the process that enqueued it)."""
        if spec is None:
            if record is not None:
                return cls.of(record, config)
            return cls(retryable=False, max_attempts=1, backoff_s=config.retry_backoff_s)
        retryable = bool(spec.retryable)
        budget = (spec.max_attempts or config.max_attempts) if retryable else 1
        return cls(retryable=retryable, max_attempts=budget, backoff_s=config.retry_backoff_s)

    @classmethod
    def of(cls, record: Mapping[str, Any], config: JobsConfig) -> RetryPolicy:
        """The policy recorded with the job when its run began (``resolve``); every
        ending of an attempt reads it here, and only here."""
        return cls(
            retryable=bool(record.get("retryable")),
            max_attempts=max_attempts_of(record),
            backoff_s=config.retry_backoff_s,
        )


@dataclass(frozen=True)
class Outcome:
    """What to write: ``finish`` with ``au_status``, or ``requeue`` due at ``due_at``."""

    au_status: ComputationStatus
    fields: dict[str, Any]
    error: str | None = None
    """The status entry's error text (a finish only)."""
    due_at: float | None = None
    note: str = ""
    """What happened, in words for the log."""
    ended: str | None = None
    """Why the attempt ended, in the words of ``Job.attempts`` (set by ``decide``)."""

    @property
    def requeued(self) -> bool:
        return self.due_at is not None


def backoff_delay(attempt: int, backoff_s: float, u: float) -> float:
    """Seconds before retry number ``attempt`` (1 after the first failure):
    uniform in [half, all] of ``backoff_s * 2**(attempt - 1)``, ``u`` in [0, 1)."""
    ceiling = backoff_s * (2 ** max(attempt - 1, 0))
    return ceiling / 2 + u * ceiling / 2


def decide(
    ending: Ending,
    record: Mapping[str, Any],
    policy: RetryPolicy,
    *,
    now: float,
    cancel_requested: bool,
    rand: Callable[[], float] = random.random,
) -> Outcome:
    """The job's next state after ``ending`` (pure; ``rand`` is the jitter source),
    with the attempt's entry in the record's ``attempts`` closed (how and when it
    ended, and its error)."""
    decided = _decide(ending, record, policy, now=now, cancel_requested=cancel_requested, rand=rand)
    word = _ended_word(ending, decided, cancel_requested)
    error = _attempt_error(word, decided.fields.get("error") or decided.error)
    closed = closed_attempts(record, ended=word, at=ending.at, error=error)
    return dataclasses.replace(decided, ended=word, fields={**decided.fields, **closed})


def _attempt_error(word: str, error: str | None) -> str | None:
    """The attempt's error beside the word it ended with: the job's error
    without a repeat of the word ("worker lost" + "retrying as attempt 2", not
    "worker lost: worker lost; retrying as attempt 2")."""
    if error is None or not error.startswith(word):
        return error
    return error[len(word) :].lstrip(" ;:") or None


def _ended_word(ending: Ending, decided: Outcome, cancel_requested: bool) -> str:
    """Why the attempt ended, in the words of ``Job.attempts``."""
    if ending.how is Ended.LOST:
        return "worker lost"
    if cancel_requested or decided.fields.get("error_kind") == ERROR_KIND_CANCELLED:
        return "cancelled"
    if ending.how is Ended.STOPPED and decided.requeued:
        return "stopped"
    if ending.how is Ended.UNSTARTED and decided.requeued:
        return "not started"
    if decided.requeued:
        return "requeued"
    if decided.au_status is ComputationStatus.COMPLETED:
        return "succeeded"
    return "failed"


def closed_attempts(
    record: Mapping[str, Any], *, ended: str, at: float, error: str | None
) -> dict[str, Any]:
    """``{"attempts": [...]}`` with the current attempt's entry (the claim
    appended it; its lease is the record's ``attempt``) closed; ``{}`` when
    there is no open entry for it (it never started, or an older record)."""
    attempts = record.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        return {}
    last = attempts[-1]
    if not isinstance(last, Mapping) or last.get("ended") is not None:
        return {}
    if last.get("lease") != record.get("attempt"):
        return {}
    return {"attempts": [*attempts[:-1], {**last, "ended": ended, "ended_at": at, "error": error}]}


def _decide(
    ending: Ending,
    record: Mapping[str, Any],
    policy: RetryPolicy,
    *,
    now: float,
    cancel_requested: bool,
    rand: Callable[[], float],
) -> Outcome:
    how, kind = ending.how, ending.error_kind
    if cancel_requested:
        return _cancelled(ending)
    if how is Ended.RETURNED:
        fields = {
            **events.stages_done(record),
            **ending.fields,
            "finished_at": ending.at,
            "error": None,
            "error_kind": None,
        }
        return Outcome(ComputationStatus.COMPLETED, fields, note="succeeded")
    if how is Ended.ORPHANED:
        gone = "the process that queued it is gone"
        return _failed(ending, f"{REAPED_REASON} before it started: {gone}")
    if how in (Ended.STOPPED, Ended.UNSTARTED) and kind != ERROR_KIND_REFUSED:
        base = int(record.get("attempt_base") or 0)
        fields = {"error": None, "error_kind": None, "attempt_base": base + 1}
        why = (
            "the worker is stopping" if how is Ended.STOPPED else "it never ran: its claim was lost"
        )
        return Outcome(
            ComputationStatus.PENDING,
            {**fields, **events.requeue_fields(record)},
            due_at=now,
            note=f"put back in the queue for the next worker ({why})",
        )
    if how is Ended.RAISED and kind == ERROR_KIND_CANCELLED:
        message = ending.message or "cancelled"
        fields = {"finished_at": ending.at, "error": message, "error_kind": kind}
        return Outcome(ComputationStatus.CANCELLED, fields, error=message, note="cancelled")
    if kind == ERROR_KIND_REFUSED:
        return _failed(ending, ending.message or "refused", kind=ERROR_KIND_REFUSED)
    # A crash, a failed launch, or a lost worker: retried while the policy allows.
    done = attempt_in_run(record)
    lost = how is Ended.LOST
    if policy.retryable and done < policy.max_attempts:
        error = f"{REAPED_REASON}; retrying as attempt {done + 1}" if lost else ending.message
        # A lost worker says nothing against the job (a restarted worker reruns it
        # at once); the attempt budget still bounds a job that kills its worker.
        delay = 0.0 if lost else backoff_delay(max(done, 1), policy.backoff_s, rand())
        fields = {"error": error, "error_kind": ERROR_KIND_CRASHED}
        return Outcome(
            ComputationStatus.PENDING,
            {**fields, **events.requeue_fields(record)},
            due_at=now + delay,
            note=f"{'worker lost' if lost else 'crashed'}; retrying as attempt {done + 1}"
            f" in {delay:.1f}s",
        )
    if not lost:
        return _failed(ending, ending.message or "crashed")
    why = "no attempts left" if policy.retryable else "its kind is not retried"
    return _failed(ending, f"{REAPED_REASON}; {why}")


def _failed(ending: Ending, message: str, kind: str = ERROR_KIND_CRASHED) -> Outcome:
    fields = {**ending.fields, "finished_at": ending.at, "error": message, "error_kind": kind}
    return Outcome(ComputationStatus.FAILED, fields, error=message, note=message)


_CANCELLED_BECAUSE = {
    Ended.RETURNED: CANCELLED_AFTER_RETURN,
    Ended.STOPPED: "cancelled on request; stopped as its worker shut down",
    Ended.LOST: f"{REAPED_REASON} before the body stopped; cancelled on request",
    Ended.ORPHANED: "cancelled on request before it started",
    Ended.UNSTARTED: "cancelled on request before it started",
    Ended.UNLAUNCHED: "cancelled on request before it started",
}


def _cancelled(ending: Ending) -> Outcome:
    """A person asked: cancelled, however the body ended. A body that returned
    keeps its result (the work was done and paid for); the flag makes it read
    cancelled."""
    if ending.how is Ended.RAISED:
        said = ending.message or ""
        if ending.error_kind == ERROR_KIND_CANCELLED:
            message = f"cancelled on request; {said}" if said else "cancelled on request"
        else:
            message = f"cancelled on request; the body then failed: {said}"
    elif ending.how is Ended.UNLAUNCHED and ending.message:
        message = f"{_CANCELLED_BECAUSE[ending.how]} (then its launch failed: {ending.message})"
    else:
        message = _CANCELLED_BECAUSE[ending.how]
    fields = {**ending.fields, "finished_at": ending.at, "error": message}
    fields["error_kind"] = ERROR_KIND_CANCELLED
    if ending.how is Ended.RETURNED:
        return Outcome(ComputationStatus.COMPLETED, fields, note=message)
    return Outcome(ComputationStatus.CANCELLED, fields, error=message, note=message)


def end_unlaunched(store: Settling, row: JobRow, message: str, config: JobsConfig) -> Future:
    """End a job whose body could not be launched (``row``: as its claim, or its
    create for an in-process body, returned it) as ``decide`` says, fenced by
    that attempt. The job is read again first: a cancel asked since then wins,
    and a job that ended meanwhile (cancelled while queued) is left as it is.
    The future of the write's answer (False: nothing written)."""
    job_id, attempt = row.record["job_id"], row.record.get("attempt")
    fresh = store.get(job_id)
    if fresh is None or fresh.status not in ACTIVE_STATUSES:
        return settled(lambda: False)
    now = config.clock()
    decided = decide(
        Ending(Ended.UNLAUNCHED, now, error_kind=ERROR_KIND_CRASHED, message=message),
        fresh.record,
        RetryPolicy.of(fresh.record, config),
        now=now,
        cancel_requested=bool(fresh.record.get("cancel_requested")),
    )
    return write_soon(store, job_id, attempt, decided)


def write(
    store: Running, job_id: str, attempt: int | None, outcome: Outcome, result: Any = None
) -> bool:
    """The outcome, written (fenced by ``attempt``); False when the attempt is stale."""
    return write_soon(store, job_id, attempt, outcome, result).result()


def write_soon(
    store: Running, job_id: str, attempt: int | None, outcome: Outcome, result: Any = None
) -> Future:
    """``write`` as a future of its answer: a finish may still be on its way to
    the commit when this returns (``JobStore.finish_soon``); a requeue is written."""
    if outcome.requeued:
        due_at = outcome.due_at
        assert due_at is not None  # what requeued means
        return settled(
            lambda: store.requeue(job_id, fields=outcome.fields, not_before=due_at, attempt=attempt)
        )
    return store.finish_soon(
        job_id,
        au_status=outcome.au_status,
        result=result if outcome.au_status is ComputationStatus.COMPLETED else None,
        error=outcome.error,
        fields=outcome.fields,
        attempt=attempt,
    )
