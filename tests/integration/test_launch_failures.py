"""A job whose body cannot be launched ends as the outcome policy says, on both
stores: cancelled when a cancel was asked first, else a crash retried while
its kind has attempts, its attempt's entry closed either way. And a kind
registered with ``max_attempts`` alone is retried."""

from __future__ import annotations

import contextlib

import pytest

from nw import jobs
from nw.jobs.core.kinds import unregister_kind
from nw.jobs.execution.runtime import Runtime
from nw.jobs.execution.worker import Worker
from tests.fixtures import bodies, policy_kinds
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop, stored_record

POLICY_KINDS = ("--import", "tests.fixtures.policy_kinds")


@pytest.fixture(autouse=True)
def registered():
    bodies.register_all()
    policy_kinds.register_all()
    yield
    for name in policy_kinds.KINDS:
        unregister_kind(name)


def done(project, job_id, cfg, timeout=30):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.is_terminal and j,
        timeout=timeout,
        what=f"job {job_id[:8]} ended",
    )


@contextlib.contextmanager
def a_worker(project, cfg, kinds_):
    """A worker of this process whose loop the test drives (it claims nothing itself)."""
    w = Worker([project], config=cfg, kinds_=kinds_)
    try:
        yield w
    finally:
        w.stopping.set()
        for rt in w.runtimes:
            rt.close(wait=False)
        w._reaping.close()
        w._listener.close()
        w._poker.close()


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-asked", "no-cancel"])
def test_a_claimed_job_whose_kind_does_not_import_ends_as_the_policy_says(
    project, cfg, cancel_first
):
    kind = "p.unlaunchable_once"
    job = jobs.enqueue(project, kind, {}, config=cfg)
    with a_worker(project, cfg, [kind]) as w:
        # Given the job claimed by the worker (running, its attempt entry open)
        (rt,) = w.runtimes
        (row,) = rt.store.claim([kind], now=cfg.clock(), runner_id=w.runner_id, limit=1)
        if cancel_first:  # and a cancel asked before its launch fails
            assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLING
        # When its launch fails (the kind's module does not import)
        w._launch_safely(rt, row)
        ended = done(project, job.job_id, cfg)
        wait_until(lambda: w.busy == 0, what="the slot of the failed launch let go")
    stored = stored_record(project, cfg, job.job_id)
    (entry,) = ended.attempts
    # Then it ended as the policy says, in the store as on read
    if cancel_first:
        assert ended.status == jobs.CANCELLED and stored["error_kind"] == "cancelled"
        assert ended.error.startswith("cancelled on request before it started")
        assert entry["ended"] == "cancelled"
    else:  # the kind is not retried: failed, a crash
        assert ended.status == jobs.FAILED and stored["error_kind"] == "crashed"
        assert entry["ended"] == "failed"
    # And its attempt is closed: when, and the error that ended it
    assert policy_kinds.MISSING in ended.error and policy_kinds.MISSING in entry["error"]
    assert entry["ended_at"] is not None and ended.attempt == 1


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-asked", "no-cancel"])
def test_an_in_process_job_its_runtime_cannot_take_ends_as_the_policy_says(
    project, cfg, monkeypatch, cancel_first
):
    # Given a runtime that refuses the job (shutting down), a cancel asked first
    def refuse(self, job_id, launch, **kwargs):
        if cancel_first:
            jobs.cancel_job(project, job_id, config=cfg)
        raise RuntimeError("cannot schedule new futures after shutdown")

    monkeypatch.setattr(Runtime, "submit", refuse)
    # When a job is enqueued to run here: the caller hears why
    with pytest.raises(RuntimeError, match="cannot schedule"):
        jobs.enqueue(project, "here", {}, dispatch={"here": lambda p, params: {}}, config=cfg)
    (job,) = jobs.list_jobs(project, config=cfg)
    stored = stored_record(project, cfg, job.job_id)
    # Then the job ended as the policy says: a cancel wins, else a crash
    if cancel_first:
        assert job.status == jobs.CANCELLED and stored["error_kind"] == "cancelled"
    else:
        assert job.status == jobs.FAILED and stored["error_kind"] == "crashed"
        assert "could not start the job in this process" in job.error
        assert job.attempts == []  # it never started: no attempt to close


def test_a_retryable_kind_whose_launch_fails_spends_its_attempts_then_fails(cfg, project):
    job = jobs.enqueue(project, "p.unlaunchable", {}, config=cfg)
    assert job.max_attempts == 2
    worker = start_worker(project, database_url=cfg.database_url, extra=POLICY_KINDS)
    try:
        ended = done(project, job.job_id, cfg)
        assert worker.poll() is None  # the worker lives on
    finally:
        stop(worker)
    assert ended.status == jobs.FAILED and ended.error_kind == "crashed"
    assert ended.attempt == 2 and policy_kinds.MISSING in ended.error
    assert [a["ended"] for a in ended.attempts] == ["requeued", "failed"]
    assert all(a["ended_at"] and policy_kinds.MISSING in a["error"] for a in ended.attempts)


def test_a_kind_registered_with_max_attempts_alone_is_retried(cfg, project, tmp_path):
    # Given a kind registered with max_attempts=2 and no retryable=
    log = tmp_path / "ran.log"
    job = jobs.enqueue(project, "p.twice", {"log": str(log)}, config=cfg)
    assert job.max_attempts == 2
    worker = start_worker(project, database_url=cfg.database_url, extra=POLICY_KINDS)
    try:
        ended = done(project, job.job_id, cfg)
    finally:
        stop(worker)
    # Then its crashing body ran twice, the second time as attempt 2 of 2
    assert log.read_text().split() == ["ran", "ran"]
    assert ended.status == jobs.FAILED and ended.attempt == 2 and ended.max_attempts == 2
    assert [a["ended"] for a in ended.attempts] == ["requeued", "failed"]
