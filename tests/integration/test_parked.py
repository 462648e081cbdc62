"""Parked provider jobs: a body submits and returns ``Submitted``; its slot goes at
once, the job stays running ("waiting on fake, 3rd in queue"), and a poll (or
the provider's webhook) resumes it. On both stores, in-process (``dispatch=``)
and with real worker processes (kill -9 included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from nw import jobs
from nw.jobs.api.handles import writer
from tests.fixtures import parked_kinds
from tests.fixtures.parked_kinds import lines
from tests.helpers import wait_until
from tests.integration.workers import ROOT, start_worker, stop

pytestmark = pytest.mark.slow

WORKER_IMPORT = ("--import", "tests.fixtures.parked_kinds")


@pytest.fixture(autouse=True)
def _kinds():
    parked_kinds.register()


@pytest.fixture
def fake(tmp_path):
    folder = tmp_path / "provider"
    folder.mkdir()
    return folder


def start(project, cfg, slots=3):
    return start_worker(
        project, max_concurrent=slots, database_url=cfg.database_url, extra=WORKER_IMPORT
    )


def parked_count(project, made, cfg):
    return sum(bool(jobs.get_job(project, j.job_id, config=cfg).parked) for j in made)


def done(project, job_id, cfg, timeout=30):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.is_terminal and j,
        timeout=timeout,
        what=f"job {job_id[:8]} finished",
    )


def parked(project, job_id, cfg, timeout=30):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.parked and j,
        timeout=timeout,
        what=f"job {job_id[:8]} parked",
    )


def test_in_process_park_frees_the_slot_and_a_poll_finishes_it(cfg, project, fake):
    # Given a body that submits to the provider and parks, run in this process
    dispatch = {"p.render": parked_kinds.render}
    params = {"dir": str(fake), "takes_s": 1.5, "position": 3}
    job = jobs.enqueue(project, "p.render", params, dispatch=dispatch, config=cfg)
    # Then it parks: running, waiting on the provider, its slot free
    seen = parked(project, job.job_id, cfg)
    assert seen.status == jobs.RUNNING
    assert seen.waiting == "waiting on fake, 3rd in queue"
    assert seen.parked["provider"] == "fake" and seen.parked["position"] == 3
    assert jobs.to_dict(seen)["parked"]["request_id"] == lines(fake, "submits.log")[0]
    rt = writer(project, cfg)
    wait_until(lambda: rt.busy == 0, timeout=5, what="the slot let go")
    assert rt.holds(job.job_id) is False
    # And a poll finishes it, with the provider's result and cost
    end = done(project, job.job_id, cfg)
    assert end.status == jobs.SUCCEEDED, end.error
    assert end.result["video"].startswith("https://fake/")
    assert end.cost.actual_usd == pytest.approx(0.25)
    assert end.parked is None and end.waiting is None
    assert len(lines(fake, "submits.log")) == 1
    assert len(lines(fake, "polls.log")) >= 1


def test_a_worker_with_one_slot_parks_every_job_at_once_and_polls_them_done(cfg, project, fake):
    # Given one worker with a single slot and six renders that take 5 s at the provider
    params = [{"dir": str(fake), "takes_s": 5.0, "i": i} for i in range(6)]
    made = jobs.enqueue_many(project, [("p.render", p) for p in params], config=cfg)
    worker = start_worker(
        project, max_concurrent=1, database_url=cfg.database_url, extra=WORKER_IMPORT
    )
    try:
        # Then all six are parked at once (one slot: no body held it while the provider worked)
        wait_until(
            lambda: (
                sum(bool(jobs.get_job(project, j.job_id, config=cfg).parked) for j in made) == 6
            ),
            timeout=30,
            what="six parked at once",
        )
        ends = [done(project, j.job_id, cfg) for j in made]
    finally:
        stop(worker)
    assert {e.status for e in ends} == {jobs.SUCCEEDED}
    assert len(lines(fake, "submits.log")) == 6  # no body ran twice


def test_a_poll_that_raises_is_retried_and_the_retry_reattaches(cfg, project, fake):
    # Given a retryable kind whose first poll fails (the provider's status route 502s)
    (fake / "fail_next_poll").write_text("1")
    params = {"dir": str(fake), "takes_s": 0.3}
    job = jobs.enqueue(project, "p.render", params, config=cfg)
    worker = start_worker(
        project, max_concurrent=2, database_url=cfg.database_url, extra=WORKER_IMPORT
    )
    try:
        end = done(project, job.job_id, cfg, timeout=60)
    finally:
        stop(worker)
    # Then the job succeeds on attempt 2, re-attached to the same request: one submit
    assert end.status == jobs.SUCCEEDED, end.error
    assert end.attempt == 2
    assert "502" in (end.attempts[0]["error"] or "")
    assert len(lines(fake, "submits.log")) == 1


def test_cancel_of_a_parked_job_cancels_at_the_provider_once(cfg, project, fake):
    params = {"dir": str(fake), "takes_s": 60}
    job = jobs.enqueue(project, "p.render", params, config=cfg)
    worker = start(project, cfg)
    try:
        parked(project, job.job_id, cfg)
        jobs.cancel_job(project, job.job_id, config=cfg)
        end = done(project, job.job_id, cfg)
        assert end.status == jobs.CANCELLED
        assert end.error_kind == jobs.ERROR_KIND_CANCELLED
        # a while later, still one remote cancel (the job ended; nothing looks at it again)
        wait_until(lambda: lines(fake, "cancels.log"), timeout=5, what="the remote cancel")
    finally:
        stop(worker)
    assert lines(fake, "cancels.log") == lines(fake, "submits.log")


def test_a_job_parked_past_its_deadline_is_cancelled_at_the_provider_and_fails(cfg, project, fake):
    params = {"dir": str(fake), "takes_s": 60, "deadline_s": 1.0}
    job = jobs.enqueue(project, "p.render", params, config=cfg)
    worker = start(project, cfg)
    try:
        end = done(project, job.job_id, cfg)
    finally:
        stop(worker)
    assert end.status == jobs.FAILED
    assert end.error == "timed out at the provider"
    assert end.attempt == 1  # never retried: it would re-attach to a cancelled request
    assert lines(fake, "cancels.log") == lines(fake, "submits.log")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_parked_jobs_outlive_their_worker_and_finish_under_the_next(cfg, project, fake, how):
    # Given 20 jobs parked by a worker that is then killed (or stopped)
    params = [{"dir": str(fake), "takes_s": 3.0, "i": i} for i in range(20)]
    made = jobs.enqueue_many(project, [("p.render", p) for p in params], config=cfg)
    first = start_worker(
        project, max_concurrent=4, database_url=cfg.database_url, extra=WORKER_IMPORT
    )
    try:
        wait_until(
            lambda: (
                sum(bool(jobs.get_job(project, j.job_id, config=cfg).parked) for j in made) == 20
            ),
            timeout=30,
            what="twenty parked",
        )
    finally:
        os.kill(first.pid, how)
        first.wait(30)
    # And the provider finishes them while no worker runs
    # When another worker starts
    second = start_worker(
        project, max_concurrent=4, database_url=cfg.database_url, extra=WORKER_IMPORT
    )
    try:
        ends = [done(project, j.job_id, cfg, timeout=60) for j in made]
    finally:
        stop(second)
    # Then every job completes, and no body ran twice
    assert {e.status for e in ends} == {jobs.SUCCEEDED}
    assert len(lines(fake, "submits.log")) == 20
    assert {e.attempt for e in ends} == {1}


def test_limits_count_parked_jobs_as_running(cfg, project, fake):
    # Given the provider's key limited to 2 running, and 5 long renders
    jobs.set_limit(project, "fake", max_running=2, config=cfg)
    params = [{"dir": str(fake), "takes_s": 60, "i": i} for i in range(5)]
    made = jobs.enqueue_many(project, [("p.render", p) for p in params], config=cfg)
    worker = start_worker(
        project, max_concurrent=4, database_url=cfg.database_url, extra=WORKER_IMPORT
    )
    try:
        wait_until(
            lambda: (
                sum(bool(jobs.get_job(project, j.job_id, config=cfg).parked) for j in made) == 2
            ),
            timeout=30,
            what="two parked",
        )
        # Then no third starts while two are parked (their slots are free; the key is full)
        wait_until(lambda: len(lines(fake, "polls.log")) >= 4, timeout=30, what="a few polls")
        states = [jobs.get_job(project, j.job_id, config=cfg).status for j in made]
        assert states.count(jobs.RUNNING) == 2 and states.count(jobs.QUEUED) == 3
        assert len(lines(fake, "submits.log")) == 2
    finally:
        stop(worker)
        jobs.set_limit(project, "fake", max_running=None, config=cfg)


def test_a_parked_job_reads_as_waiting_on_its_provider_everywhere(cfg, project, fake):
    from starlette.testclient import TestClient

    from nw.cli.render import plain_line
    from nw.jobs.web import create_app

    dispatch = {"p.render": parked_kinds.render}
    params = {"dir": str(fake), "takes_s": 60, "position": 2}
    job = jobs.enqueue(project, "p.render", params, dispatch=dispatch, config=cfg)
    seen = parked(project, job.job_id, cfg)
    shown = jobs.to_dict(seen)
    assert shown["waiting"] == "waiting on fake, 2nd in queue"
    assert shown["worker_responsive"] is None and shown["worker_silent_s"] is None
    assert "waiting on fake, 2nd in queue" in plain_line(shown)  # the CLI's line
    client = TestClient(create_app([project], config=cfg))
    api = client.get(f"/api/jobs/{job.job_id}").json()
    assert api["status"] == "running" and api["parked"]["provider"] == "fake"
    metrics = client.get("/metrics").text
    assert f'nw_jobs_parked{{kind="p.render",project="{project.root}"}} 1.0' in metrics
    assert f'nw_jobs_running{{kind="p.render",project="{project.root}"}} 1.0' in metrics
    jobs.cancel_job(project, job.job_id, config=cfg)
    assert done(project, job.job_id, cfg).status == jobs.CANCELLED


def test_a_parked_job_s_eta_is_the_provider_phase_learned_apart_from_the_submit(cfg, project, fake):
    from nw.jobs.api.handles import writer as runtime_of

    dispatch = {"p.render": parked_kinds.render}
    model = {"model": "kling", "operation": "t2v", "quiet": True}
    # Given three renders the provider took under a second for
    for i in range(3):
        job = jobs.enqueue(
            project,
            "p.render",
            {**model, "dir": str(fake), "takes_s": 0.6, "i": i},
            dispatch=dispatch,
            config=cfg,
        )
        assert done(project, job.job_id, cfg).status == jobs.SUCCEEDED
    store = runtime_of(project, cfg).store
    key = "kling|t2v:provider"
    # (written once per look, just after the finishes it made)
    learned = wait_until(
        lambda: (got := store.samples([key], window=20)) and len(got[key]) == 3 and got,
        timeout=10,
        what="three samples of the provider phase",
    )
    # When a fourth parks
    job = jobs.enqueue(
        project,
        "p.render",
        {**model, "dir": str(fake), "takes_s": 30, "i": 9},
        dispatch=dispatch,
        config=cfg,
    )
    seen = parked(project, job.job_id, cfg)
    # Then its ETA is that phase's learned time (not the prior): under a few seconds
    assert all(0.5 <= s < 5 for s in learned[key])
    assert seen.eta_s is not None and seen.eta_s < 5  # the prior would say ~30 s
    jobs.cancel_job(project, job.job_id, config=cfg)


@pytest.mark.parametrize("end", ["cancel", "deadline"])
def test_in_process_cancel_and_deadline_reach_the_provider(cfg, project, fake, end):
    dispatch = {"p.render": parked_kinds.render}
    params = {"dir": str(fake), "takes_s": 60}
    if end == "deadline":
        params["deadline_s"] = 1.0
    job = jobs.enqueue(project, "p.render", params, dispatch=dispatch, config=cfg)
    parked(project, job.job_id, cfg)
    if end == "cancel":
        jobs.cancel_job(project, job.job_id, config=cfg)
    final = done(project, job.job_id, cfg)
    if end == "cancel":
        assert final.status == jobs.CANCELLED
    else:
        assert final.status == jobs.FAILED and final.error == "timed out at the provider"
    assert lines(fake, "cancels.log") == lines(fake, "submits.log")


def test_a_job_parked_in_a_process_that_died_is_finished_by_a_worker(cfg, project, fake):
    # Given an app process that parks a job in-process, then dies (kill -9)
    script = f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from nw import Project, jobs
from nw.jobs.core.model import JobsConfig
from tests.fixtures import parked_kinds
cfg = JobsConfig(database_url={cfg.database_url!r})
project = Project({str(project.root)!r})
params = {{"dir": {str(fake)!r}, "takes_s": 1.0}}
job = jobs.enqueue(project, "p.render", params, dispatch={{"p.render": parked_kinds.render}},
                   config=cfg)
while not jobs.get_job(project, job.job_id, config=cfg).parked:
    time.sleep(0.02)
print(job.job_id, flush=True)
os.kill(os.getpid(), 9)
"""
    app = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    job_id = app.stdout.strip()
    assert app.returncode == -signal.SIGKILL and job_id, app.stderr
    assert jobs.get_job(project, job_id, config=cfg).status == jobs.RUNNING
    # When a worker of the kind runs
    worker = start(project, cfg)
    try:
        final = done(project, job_id, cfg)
    finally:
        stop(worker)
    # Then it finishes the job without a second submit
    assert final.status == jobs.SUCCEEDED, final.error
    assert len(lines(fake, "submits.log")) == 1
