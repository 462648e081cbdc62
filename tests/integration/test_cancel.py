"""Cancel is durable, race-proof, idempotent, and leaves finished jobs alone."""

from __future__ import annotations

import threading

from nw import jobs
from tests.helpers import wait_until


def test_a_running_job_reads_cancelling_then_cancelled_and_its_body_sees_it(project, cfg, gate):
    job = jobs.enqueue(project, "r", {}, dispatch={"r": gate}, config=cfg)
    assert gate.started.wait(5)
    got = jobs.cancel_job(project, job.job_id, config=cfg)
    assert got.status in (jobs.CANCELLING, jobs.CANCELLED)
    done = wait_until(
        lambda: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j
    )
    assert done.status == jobs.CANCELLED and done.error_kind == "cancelled"
    assert done.grade == "notice"


def test_cancelled_stays_cancelled_when_the_body_ignores_it_and_completes(project, cfg):
    proceed, started = threading.Event(), threading.Event()

    def stubborn(project, params):
        started.set()
        proceed.wait(10)
        return {"rendered": True}

    job = jobs.enqueue(project, "r", {}, dispatch={"r": stubborn}, config=cfg)
    assert started.wait(5)
    assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLING
    assert jobs.get_job(project, job.job_id, config=cfg).status == jobs.CANCELLING
    proceed.set()  # the thread now writes COMPLETED; the cancel intent still wins
    done = wait_until(
        lambda: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j
    )
    assert done.status == jobs.CANCELLED


def test_cancel_is_idempotent_and_unknown_ids_answer_none(project, cfg):
    from nw.jobs.stores import shared_store

    proceed, started = threading.Event(), threading.Event()

    def stubborn(project, params):  # never looks at should_cancel: stays cancelling
        started.set()
        proceed.wait(10)
        return {"ok": 1}

    job = jobs.enqueue(project, "r", {}, dispatch={"r": stubborn}, config=cfg)
    assert started.wait(5)
    store = shared_store(project, cfg, create=False)
    assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLING
    before = store.get(job.job_id)
    assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLING
    after = store.get(job.job_id)
    assert after.record == before.record and after.au_status == before.au_status
    proceed.set()
    assert jobs.cancel_job(project, "0" * 64, config=cfg) is None


def test_a_finished_job_is_left_exactly_as_it_was(project, cfg):
    job = jobs.enqueue(
        project, "r", {}, dispatch={"r": lambda p, q: {"artifact_ref": "a9"}}, config=cfg
    )
    done = wait_until(
        lambda: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j
    )
    store = __import__("nw.jobs.stores", fromlist=["x"]).shared_store(project, cfg, create=False)
    before = store.get(job.job_id)
    after_cancel = jobs.cancel_job(project, job.job_id, config=cfg)
    assert after_cancel.status == jobs.SUCCEEDED
    assert (after_cancel.result, after_cancel.pct, after_cancel.artifact_ref) == (
        done.result,
        100.0,
        "a9",
    )
    assert store.get(job.job_id) == before  # nothing was written


def test_a_queued_job_cancelled_before_it_starts_never_runs(project, gate):
    cfg = jobs.JobsConfig(max_concurrent=1)
    ran = []
    blocker = jobs.enqueue(project, "block", {}, dispatch={"block": gate}, config=cfg)
    assert gate.started.wait(5)
    queued = jobs.enqueue(project, "r", {}, dispatch={"r": lambda p, q: ran.append(1)}, config=cfg)
    assert queued.status == jobs.QUEUED
    assert jobs.cancel_job(project, queued.job_id, config=cfg).status == jobs.CANCELLED
    gate.release.set()
    wait_until(lambda: jobs.get_job(project, blocker.job_id, config=cfg).is_terminal)
    from nw.jobs.execution.runtimes import shutdown_runtimes

    shutdown_runtimes(wait=True)  # every thread of the pool has finished its work
    assert ran == []
    assert jobs.get_job(project, queued.job_id, config=cfg).status == jobs.CANCELLED
