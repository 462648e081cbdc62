"""Heartbeats, the liveness predicate, and reaping a dead worker's job on read."""

from __future__ import annotations

import os

from nw import jobs
from nw.jobs.execution import recovery
from nw.jobs.stores import shared_store
from tests.helpers import python_process, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _backend_env(cfg) -> dict[str, str]:
    """The child process uses the test's backend (PostgreSQL by env URL)."""
    return {"NW_JOBS_DATABASE_URL": cfg.database_url} if cfg.database_url else {}


def test_a_running_job_beats_and_the_beat_stops_when_the_body_returns(project, cfg, gate):
    job = jobs.enqueue(project, "r", {}, dispatch={"r": gate}, config=cfg)
    assert gate.started.wait(5)
    first = jobs.get_job(project, job.job_id, config=cfg)
    assert first.worker_responsive is True and first.worker_silent_s is not None
    store = __import__("nw.jobs.stores", fromlist=["x"]).shared_store(project, cfg, create=False)
    beat0 = store.get(job.job_id).record["heartbeat_at"]
    wait_until(lambda: store.get(job.job_id).record["heartbeat_at"] > beat0, what="a second beat")
    gate.release.set()
    done = wait_until(
        lambda: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j
    )
    assert done.worker_responsive is None and done.worker_silent_s is None
    last = store.get(job.job_id).record["heartbeat_at"]
    # two intervals later nothing has beaten for the finished job
    import time

    deadline = time.monotonic() + 2 * cfg.heartbeat_interval_s
    while time.monotonic() < deadline:
        assert store.get(job.job_id).record["heartbeat_at"] == last
        time.sleep(cfg.heartbeat_interval_s / 4)


def test_a_job_whose_process_was_killed_is_reaped_on_read(project, cfg):
    script = f"""
        import sys, time
        from nw import jobs
        cfg = jobs.JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, stale_running_s=2.0)
        def body(project, params):
            time.sleep(60)
        root = {str(project.root)!r}
        job = jobs.enqueue(root, "slow", {{}}, dispatch={{"slow": body}}, config=cfg)
        while jobs.get_job(root, job.job_id, config=cfg).status != "running":
            time.sleep(0.01)
        print(job.job_id, flush=True)
        time.sleep(60)
    """
    with python_process(script, _backend_env(cfg)) as proc:
        job_id = proc.stdout.readline().strip()
        assert jobs.get_job(project, job_id, config=cfg).status == jobs.RUNNING
    # summarize is read-only: it reports, it does not reap
    dead = wait_until(
        lambda: (j := jobs.summarize(project, config=cfg)[0]).worker_responsive is False and j,
        what="the beat to go stale",
    )
    assert dead.status == jobs.RUNNING
    reaped = jobs.get_job(project, job_id, config=cfg)
    assert reaped.status == jobs.FAILED
    assert reaped.error == "worker lost; its kind is not retried"
    assert reaped.error_kind == "crashed"
    assert reaped.grade == "error"


def test_a_held_job_is_not_reaped_even_when_its_beat_is_old(project, gate):
    # The beat interval is longer than the staleness window: only the in-process
    # liveness map keeps this job alive, and it must.
    cfg = jobs.JobsConfig(heartbeat_interval_s=30, heartbeat_stale_s=31, stale_running_s=0.0)
    job = jobs.enqueue(project, "r", {}, dispatch={"r": gate}, config=cfg)
    assert gate.started.wait(5)
    later = jobs.JobsConfig(
        heartbeat_interval_s=30,
        heartbeat_stale_s=31,
        stale_running_s=0.0,
        clock=lambda: __import__("time").time() + 3600,
    )
    assert jobs.get_job(project, job.job_id, config=later).status == jobs.RUNNING
    assert jobs.get_job(project, job.job_id, config=later).worker_responsive is False


def test_a_body_past_its_time_limit_is_reported_and_cancelled_when_allowed(project, gate):
    report = jobs.JobsConfig(heartbeat_interval_s=0.05, heartbeat_stale_s=5, job_timeout_s=0.2)
    job = jobs.enqueue(project, "r", {}, dispatch={"r": gate}, config=report)
    overdue = wait_until(
        lambda: (
            (j := jobs.get_job(project, job.job_id, config=report)).label_hint
            == "past its time limit"
            and j
        ),
        what="the overdue report",
    )
    assert overdue.status == jobs.RUNNING  # reported, not stopped
    gate.release.set()
    wait_until(lambda: jobs.get_job(project, job.job_id, config=report).is_terminal)
    from nw.jobs.execution.runtimes import shutdown_runtimes

    shutdown_runtimes()
    stopping = jobs.JobsConfig(
        heartbeat_interval_s=0.05, heartbeat_stale_s=5, job_timeout_s=0.2, cancel_on_timeout=True
    )
    gate2 = type(gate)()
    other = jobs.enqueue(project, "r", {"n": 2}, dispatch={"r": gate2}, config=stopping)
    ended = wait_until(
        lambda: (j := jobs.get_job(project, other.job_id, config=stopping)).is_terminal and j,
        what="the cancel on timeout",
    )
    # The body itself saw the cancel and stopped (it was never released).
    assert ended.status == jobs.CANCELLED and gate2.cancelled.is_set() and gate2.calls == 1


def test_jobs_queued_in_a_process_that_died_do_not_wait_forever(project, cfg):
    script = f"""
        import time
        from nw import jobs
        cfg = jobs.JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, max_concurrent=1)
        body = {{"slow": lambda project, params: time.sleep(60)}}
        root = {str(project.root)!r}
        first = jobs.enqueue(root, "slow", {{"n": 1}}, dispatch=body, config=cfg)
        second = jobs.enqueue(root, "slow", {{"n": 2}}, dispatch=body, config=cfg)
        while jobs.get_job(root, first.job_id, config=cfg).status != "running":
            time.sleep(0.01)
        print(first.job_id, second.job_id, flush=True)
        time.sleep(60)
    """
    with python_process(script, _backend_env(cfg)) as proc:
        first, second = proc.stdout.readline().split()
        assert jobs.get_job(project, second, config=cfg).status == jobs.QUEUED
    for job_id in (first, second):
        ended = wait_until(
            lambda j=job_id: (x := jobs.get_job(project, j, config=cfg)).is_terminal and x,
            what="the orphaned job to be closed",
        )
        assert ended.status == jobs.FAILED and ended.error.startswith(jobs.REAPED_REASON)


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
