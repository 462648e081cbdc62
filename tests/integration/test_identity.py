"""Idempotency: the job id is the key; a live duplicate is the same job."""

from __future__ import annotations

import threading

from nw import jobs
from tests.helpers import wait_until


def test_a_resubmit_while_live_returns_the_same_job_and_runs_nothing(project, cfg, gate):
    first = jobs.enqueue(project, "r", {"x": 1}, dispatch={"r": gate}, config=cfg)
    assert gate.started.wait(5)
    again = jobs.enqueue(project, "r", {"x": 1}, dispatch={"r": gate}, config=cfg)
    assert again.job_id == first.job_id and again.run_id == first.run_id
    gate.release.set()
    wait_until(lambda: jobs.get_job(project, first.job_id, config=cfg).is_terminal)
    assert gate.calls == 1


def test_equal_params_in_another_key_order_are_the_same_job(project, cfg, gate):
    a = jobs.enqueue(project, "r", {"x": 1, "y": 2.0}, dispatch={"r": gate}, config=cfg)
    b = jobs.enqueue(project, "r", {"y": 2, "x": 1}, dispatch={"r": gate}, config=cfg)
    c = jobs.enqueue(project, "other", {"x": 1, "y": 2}, dispatch={"other": gate}, config=cfg)
    assert a.job_id == b.job_id != c.job_id


def test_a_finished_key_runs_again_as_a_new_run(project, cfg):
    calls = []

    def body(project, params):
        calls.append(1)
        return {"n": len(calls)}

    first = jobs.enqueue(project, "r", {}, dispatch={"r": body}, config=cfg)
    wait_until(lambda: jobs.get_job(project, first.job_id, config=cfg).is_terminal)
    second = jobs.enqueue(project, "r", {}, dispatch={"r": body}, config=cfg)
    assert second.job_id == first.job_id and second.run_id != first.run_id
    done = wait_until(
        lambda: (j := jobs.get_job(project, first.job_id, config=cfg)).is_terminal and j
    )
    assert done.result == {"n": 2} and len(calls) == 2


def test_an_explicit_idempotency_key_wins_over_params(project, cfg, gate):
    a = jobs.enqueue(
        project, "r", {"x": 1}, idempotency_key="order-7", dispatch={"r": gate}, config=cfg
    )
    b = jobs.enqueue(
        project, "r", {"x": 2}, idempotency_key="order-7", dispatch={"r": gate}, config=cfg
    )
    assert a.job_id == b.job_id and b.params == {"x": 1} and a.idempotency_key == "order-7"


def test_threads_enqueueing_one_key_at_the_same_instant_run_it_once(project, cfg, gate):
    barrier = threading.Barrier(8)
    ids = []

    def submit():
        barrier.wait()
        ids.append(
            jobs.enqueue(project, "r", {"same": True}, dispatch={"r": gate}, config=cfg).job_id
        )

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # A thread that raised appended nothing (its exception is only a warning): all eight
    # must have come back with an id, and it must be one id.
    assert len(ids) == 8 and len(set(ids)) == 1
    gate.release.set()
    wait_until(lambda: jobs.get_job(project, ids[0], config=cfg).is_terminal)
    assert gate.calls == 1
