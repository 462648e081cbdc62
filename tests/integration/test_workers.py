"""Tier 2 and 3 with real worker processes: claims, recovery, fencing, drain, cancel.

Every test runs on both stores (the ``cfg`` fixture: SQLite, then PostgreSQL),
with fast job heartbeats; the workers get the same store and beats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from nw import jobs
from tests.fixtures import bodies
from tests.helpers import wait_until
from tests.integration.workers import (
    ROOT,
    pause_outside_a_write,
    registered_workers,
    start_worker,
    stop,
    stored_record,
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _kinds():
    bodies.register_all()


def done(project, job_id, cfg, timeout=30):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.is_terminal and j,
        timeout=timeout,
        what=f"job {job_id[:8]}",
    )


def test_four_workers_run_each_of_400_jobs_exactly_once(cfg, project, tmp_path):
    log = tmp_path / "ran.log"
    queued = [
        jobs.enqueue(project, "t.noop", {"i": i, "log": str(log)}, config=cfg) for i in range(400)
    ]
    assert {j.status for j in queued} == {jobs.QUEUED}
    workers = [start_worker(project, database_url=cfg.database_url) for _ in range(4)]
    try:
        # A worker stopped while still importing dies of the SIGTERM (no handler yet):
        # all four must be serving before the drain can end.
        wait_until(lambda: registered_workers(project, cfg) == 4, timeout=60, what="4 workers")
        wait_until(
            lambda: len(jobs.list_jobs(project, status="succeeded", limit=500, config=cfg)) == 400,
            timeout=60,
            what="400 jobs done",
        )
    finally:
        for w in workers:
            stop(w)
    counts = Counter(log.read_text().split())
    assert len(counts) == 400 and set(counts.values()) == {1}
    assert all(w.returncode == 0 for w in workers)


def test_a_worker_never_holds_more_jobs_at_once_than_its_slots(cfg, project, tmp_path):
    # Given a backlog of short jobs (on PostgreSQL the finishes claim their
    # slots' next jobs, up to two batches in flight)
    log = tmp_path / "ran.log"
    items = [("t.noop", {"i": i, "log": str(log)}) for i in range(300)]
    jobs.enqueue_many(project, items, config=cfg)
    # at the worker's default log level: its line per job widens the window
    # between a runtime letting a job go and the worker's own bookkeeping
    worker = start_worker(
        project,
        max_concurrent=10,
        database_url=cfg.database_url,
        extra=["--log-level", "INFO"],
        log_path=tmp_path / "worker.log",
    )
    try:
        done = wait_until(
            lambda: (
                (got := jobs.list_jobs(project, status="succeeded", limit=500, config=cfg))
                and len(got) == 300
                and got
            ),
            timeout=60,
            what="300 jobs done",
        )
    finally:
        stop(worker)
    # Then each ran once, and never more than 10 were held (claimed, not yet
    # finished) at a time: a job waiting for a thread holds a slot too
    counts = Counter(log.read_text().split())
    assert len(counts) == 300 and set(counts.values()) == {1}
    edges = [(j.started_at, 1) for j in done] + [(j.finished_at, -1) for j in done]
    held = most = 0
    for _, step in sorted(edges):  # at one instant a finish comes before a claim
        held += step
        most = max(most, held)
    assert 1 < most <= 10, most


def test_kill_9_mid_job_is_recovered_and_a_retryable_job_resumes_without_paying_twice(
    cfg, project, tmp_path
):
    log, hold = tmp_path / "provider.log", tmp_path / "hold"
    hold.write_text("x")
    job = jobs.enqueue(project, "t.paid", {"log": str(log), "hold_file": str(hold)}, config=cfg)
    first = start_worker(project, database_url=cfg.database_url)
    try:
        # The body logs "submit" before its event is stored: kill only once the
        # record holds the request id, or the retry would have nothing to resume.
        wait_until(
            lambda: (stored_record(project, cfg, job.job_id).get("resume") or {}).get("request_id"),
            what="the provider request id in the stored record",
        )
        first.send_signal(signal.SIGKILL)
        first.wait()
        hold.unlink()
        second = start_worker(project, database_url=cfg.database_url)
        try:
            finished = done(project, job.job_id, cfg)
        finally:
            stop(second)
    finally:
        stop(first)
    assert finished.status == jobs.SUCCEEDED
    assert finished.attempt == 2 and finished.max_attempts == 3
    lines = log.read_text().split("\n")
    assert sum(line.startswith("submit") for line in lines) == 1
    assert any(line.startswith("poll req-") for line in lines)
    assert finished.artifact_ref == "vid-1" and finished.cost.actual_usd == 0.4


def test_a_paused_worker_cannot_overwrite_the_attempt_that_replaced_it(cfg, project, tmp_path):
    log, first_log = tmp_path / "sleepy.log", tmp_path / "first-worker.log"
    job = jobs.enqueue(project, "t.sleepy", {"seconds": 1.5, "log": str(log)}, config=cfg)
    first = start_worker(project, log_path=first_log, database_url=cfg.database_url)
    try:
        wait_until(lambda: log.exists() and "start" in log.read_text(), what="first attempt")
        pause_outside_a_write(first, project, cfg)  # alive but silent: its beat goes stale
        second = start_worker(project, database_url=cfg.database_url)
        try:
            replaced = done(project, job.job_id, cfg)
            assert replaced.status == jobs.SUCCEEDED and replaced.attempt == 2
            first.send_signal(signal.SIGCONT)  # the old attempt finishes and tries to write
            # the old attempt's body runs on, then tries to write its outcome: refused
            wait_until(
                lambda: "is no longer current" in first_log.read_text(),
                what="the stale attempt's refused write",
            )
            final = jobs.get_job(project, job.job_id, config=cfg)
            assert (final.attempt, final.status, final.run_id) == (
                2,
                jobs.SUCCEEDED,
                replaced.run_id,
            )
        finally:
            stop(second)
    finally:
        first.send_signal(signal.SIGCONT)
        stop(first)
    trail = jobs.get_job_progress(project, job.job_id, limit=10_000, config=cfg)
    assert trail and all(b["attempt"] in (1, 2) for b in trail)


def test_sigterm_drains_and_leaves_the_job_resumable(cfg, project, tmp_path):
    job = jobs.enqueue(project, "t.sleepy", {"seconds": 30}, config=cfg)
    log = tmp_path / "worker.log"
    worker = start_worker(
        project, log_path=log, extra=("--log-level", "INFO"), database_url=cfg.database_url
    )
    try:
        wait_until(lambda: jobs.get_job(project, job.job_id, config=cfg).status == jobs.RUNNING)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    finally:
        stop(worker)
    back = jobs.get_job(project, job.job_id, config=cfg)
    assert back.status == jobs.QUEUED and back.error is None
    assert back.attempt == 0  # a graceful stop gives its attempt back
    assert "stopped: 1 job(s) requeued (1 stopped at a boundary" in log.read_text()


def test_cross_process_cancel_of_running_and_of_queued_jobs(cfg, project, tmp_path):
    log = tmp_path / "noop.log"
    queued = jobs.enqueue(project, "t.noop", {"i": 1, "log": str(log)}, config=cfg)
    assert jobs.cancel_job(project, queued.job_id, config=cfg).status == jobs.CANCELLED
    running = jobs.enqueue(project, "t.sleepy", {"seconds": 30}, config=cfg)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        wait_until(lambda: jobs.get_job(project, running.job_id, config=cfg).status == jobs.RUNNING)
        jobs.cancel_job(project, running.job_id, config=cfg)
        ended = done(project, running.job_id, cfg, timeout=5)
        assert ended.status == jobs.CANCELLED and ended.error_kind == "cancelled"
    finally:
        stop(worker)
    assert not log.exists()  # the queued job that was cancelled never ran
    assert jobs.get_job(project, queued.job_id, config=cfg).status == jobs.CANCELLED


def test_a_kind_that_does_not_import_fails_its_job_and_the_worker_lives_on(cfg, project, tmp_path):
    broken = jobs.enqueue(project, "t.broken", {}, config=cfg)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        failed = done(project, broken.job_id, cfg)
        good = jobs.enqueue(project, "t.noop", {"i": 2}, config=cfg)
        assert done(project, good.job_id, cfg).status == jobs.SUCCEEDED
        assert worker.poll() is None
    finally:
        stop(worker)
    assert failed.status == jobs.FAILED
    assert "tests.fixtures.no_such_module:render" in failed.error


def test_a_worker_takes_secrets_from_its_own_environment(cfg, project):
    job = jobs.enqueue(project, "t.secret", {}, config=cfg)
    worker = start_worker(
        project, env={"NW_SECRET_FAL": "worker-key-123"}, database_url=cfg.database_url
    )
    try:
        result = done(project, job.job_id, cfg).result
    finally:
        stop(worker)
    assert result == {"names": ["fal"], "fal_len": len("worker-key-123")}


def test_a_web_process_enqueues_and_reads_without_importing_the_body(cfg, project):
    script = textwrap.dedent(f"""
        import sys, time
        from nw import jobs
        jobs.register_kind("t.noop", "tests.fixtures.bodies:noop")
        cfg = jobs.JobsConfig(
            heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, database_url={cfg.database_url!r}
        )
        job = jobs.enqueue({str(project.root)!r}, "t.noop", {{"i": 5}}, config=cfg)
        deadline = time.monotonic() + 30
        while not jobs.get_job({str(project.root)!r}, job.job_id, config=cfg).is_terminal:
            assert time.monotonic() < deadline, "job did not finish"
            time.sleep(0.01)
        print(jobs.get_job({str(project.root)!r}, job.job_id, config=cfg).status)
        print("tests.fixtures.bodies" in sys.modules)
    """)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
            timeout=60,
        )
    finally:
        stop(worker)
    assert out.stdout.split() == ["succeeded", "False"], out.stderr


def test_the_progress_trail_is_kept_per_job_oldest_first(cfg, project):
    job = jobs.enqueue(project, "t.sleepy", {"seconds": 0.3}, config=cfg)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        done(project, job.job_id, cfg)
    finally:
        stop(worker)
    trail = jobs.get_job_progress(project, job.job_id, limit=1000, config=cfg)
    assert len(trail) >= 5
    assert [b["ts"] for b in trail] == sorted(b["ts"] for b in trail)
    assert trail[0]["message"] == "step 1"
    tail = jobs.get_job_progress(project, job.job_id, limit=3, config=cfg)
    assert tail == trail[-3:]


def test_a_crashed_retryable_job_is_retried_and_its_spend_adds_up(cfg, project, tmp_path):
    job = jobs.enqueue(project, "t.flaky", {"marker": str(tmp_path / "m")}, config=cfg)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        ended = done(project, job.job_id, cfg)
    finally:
        stop(worker)
    assert ended.status == jobs.SUCCEEDED and ended.attempt == 2
    assert ended.cost.actual_usd == pytest.approx(0.5)
    assert jobs.spend(project, config=cfg)["actual_usd"] == pytest.approx(0.5)


def test_sigterm_exits_after_the_grace_even_when_a_body_ignores_it(cfg, project, tmp_path):
    job = jobs.enqueue(project, "t.stubborn", {"seconds": 60}, config=cfg)
    log = tmp_path / "worker.log"
    extra = ("--shutdown-grace", "0.5", "--log-level", "INFO")
    worker = start_worker(project, log_path=log, extra=extra, database_url=cfg.database_url)
    try:
        wait_until(lambda: jobs.get_job(project, job.job_id, config=cfg).status == jobs.RUNNING)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0  # a deadline well short of the body's 60 s
    finally:
        stop(worker)
    assert jobs.get_job(project, job.job_id, config=cfg).status == jobs.QUEUED
    assert "1 job(s) requeued (0 stopped at a boundary, 1 still running" in log.read_text()
