"""Regressions found in review: each of these failed before its fix."""

from __future__ import annotations

import pytest

from nw import jobs
from nw.jobs import recovery
from nw.jobs.stores import shared_store
from tests.helpers import wait_until


def test_a_workers_reaper_leaves_a_live_processs_queued_jobs_alone(project, cfg, gate):
    one = jobs.JobsConfig(
        max_concurrent=1,
        heartbeat_interval_s=0.2,
        heartbeat_stale_s=1.0,
        database_url=cfg.database_url,
    )
    jobs.enqueue(project, "b", {}, dispatch={"b": gate}, config=one)
    assert gate.started.wait(5)
    waiting = jobs.enqueue(project, "r", {"n": 2}, dispatch={"r": gate}, config=one)
    store = shared_store(project, one, create=False)
    # a worker process holds none of this process's jobs
    reaped = recovery.reap_stale(store, one.clock(), one, holds=lambda _id: False)
    assert reaped == []
    assert jobs.get_job(project, waiting.job_id, config=one).status == jobs.QUEUED


def test_a_capture_hook_that_fails_leaves_no_job_behind(project, cfg):
    def broken_hook():
        raise RuntimeError("no request context")

    with pytest.raises(RuntimeError, match="no request context"):
        jobs.enqueue(
            project,
            "r",
            {},
            dispatch={"r": lambda p, q: {"ok": 1}},
            capture_context=broken_hook,
            config=cfg,
        )
    assert jobs.list_jobs(project, config=cfg) == []


def test_re_running_a_job_keeps_what_earlier_runs_spent(project, cfg):
    def paid(project, params):
        return {"cost_usd_actual": 4.0, "has_unknown_costs": False}

    for run in (1, 2):
        job = jobs.enqueue(project, "r", {}, dispatch={"r": paid}, config=cfg)
        done = wait_until(
            lambda j=job: (x := jobs.get_job(project, j.job_id, config=cfg)).is_terminal and x
        )
        assert done.cost.actual_usd == 4.0 and done.attempt == 1  # this run's own figures
        assert jobs.spend(project, config=cfg)["actual_usd"] == pytest.approx(4.0 * run)


def test_a_budget_cannot_be_bypassed_by_re_running_one_key(project, cfg):
    capped = jobs.JobsConfig(budget_usd=5.0, database_url=cfg.database_url)

    def paid(project, params):
        return {"cost_usd_actual": 4.0, "has_unknown_costs": False}

    job = jobs.enqueue(project, "r", {"estimated_usd": 4.0}, dispatch={"r": paid}, config=capped)
    wait_until(lambda: jobs.get_job(project, job.job_id, config=capped).is_terminal)
    with pytest.raises(jobs.BudgetExceeded):
        jobs.enqueue(project, "r", {"estimated_usd": 4.0}, dispatch={"r": paid}, config=capped)


def test_snapshot_counts_every_live_job_however_deep_the_history(project, cfg):
    jobs.register_kind("t.later", "tests.fixtures.bodies:noop")
    waiting = jobs.enqueue(project, "t.later", {"i": 0}, config=cfg)  # no worker: stays queued
    ok = {"r": lambda p, q: {"ok": 1}}
    for i in range(100):
        jobs.enqueue(project, "r", {"i": i}, dispatch=ok, config=cfg)
    wait_until(
        lambda: len(jobs.list_jobs(project, status="succeeded", limit=200, config=cfg)) == 100
    )
    snap = jobs.snapshot([project], active_limit=5, recent_limit=3, config=cfg)
    assert snap["active_count"] == 1
    assert [j["job_id"] for j in snap["active"]] == [waiting.job_id]
    assert len(snap["recent"]) == 3


def test_predict_total_s_answers_the_documented_triple():
    p50, p90, confidence = jobs.predict_total_s(["m|o"], "video", durations={"m|o": [4, 5, 6]})
    assert (p50, confidence) == (pytest.approx(5.0, rel=0.1), "learned") and p90 >= p50
