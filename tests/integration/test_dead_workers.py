"""A dead worker's jobs are found in seconds, by the one liveness predicate.

Two ways to know, each tested alone by making the other impossible:

* proof (same host): the worker's pid is free or reused. The windows here are
  ten minutes, so nothing but the proof can reap within the test's patience.
* silence: the worker's own beat (``runners.beat_at``) is older than
  ``worker_stale_s``. A SIGSTOPped worker is alive to the kernel (no proof),
  and the job heartbeat windows are again ten minutes: only the worker's beat
  can find it.

Both stores (the ``cfg`` fixture), real worker processes.
"""

from __future__ import annotations

import signal
import time

import pytest

from nw import jobs
from tests.fixtures import bodies
from tests.helpers import wait_until
from tests.integration.workers import pause_outside_a_write, start_worker, stop

pytestmark = pytest.mark.slow

SLOW_JOB_BEATS = {"heartbeat_interval_s": 300.0, "heartbeat_stale_s": 600.0}
SLOW_JOB_FLAGS = ("--heartbeat-interval", "300", "--heartbeat-stale", "600")
NO_SILENCE = {**SLOW_JOB_BEATS, "worker_stale_s": 600.0}
NO_SILENCE_FLAGS = (*SLOW_JOB_FLAGS, "--worker-stale", "600")


@pytest.fixture(autouse=True)
def _kinds():
    bodies.register_all()


def _config(cfg, **fields):
    return jobs.JobsConfig(database_url=cfg.database_url, **fields)


def _running(project, job_id, config, attempt=1):
    return wait_until(
        lambda: (
            (j := jobs.get_job(project, job_id, config=config)).status == jobs.RUNNING
            and j.attempt == attempt
            and j
        ),
        timeout=30,
        what=f"attempt {attempt} running",
    )


def test_a_killed_worker_is_proved_gone_and_a_restarted_worker_runs_its_job(cfg, project):
    config = _config(cfg, **NO_SILENCE)
    job = jobs.enqueue(project, "t.sleepy", {"seconds": 1.0}, config=config)
    first = start_worker(project, database_url=cfg.database_url, extra=NO_SILENCE_FLAGS)
    try:
        _running(project, job.job_id, config)
        first.send_signal(signal.SIGKILL)
        first.wait()
        # Read-only, so nothing reaps: the predicate alone says the worker is lost.
        (seen,) = jobs.summarize(project, config=config)
        assert seen.status == jobs.RUNNING and seen.worker_responsive is False
        second = start_worker(project, database_url=cfg.database_url, extra=NO_SILENCE_FLAGS)
        try:
            ended = wait_until(
                lambda: (j := jobs.summarize(project, config=config)[0]).is_terminal and j,
                timeout=30,
                what="the job run again by the restarted worker",
            )
        finally:
            stop(second)
    finally:
        stop(first)
    assert ended.status == jobs.SUCCEEDED and ended.attempt == 2


def test_a_killed_workers_job_that_cannot_retry_fails_when_another_worker_sees_it(cfg, project):
    config = _config(cfg, **NO_SILENCE)
    one_slot = {"database_url": cfg.database_url, "extra": NO_SILENCE_FLAGS, "max_concurrent": 1}
    workers = [start_worker(project, **one_slot) for _ in range(2)]
    try:
        hog = jobs.enqueue(project, "t.sleepy", {"seconds": 60}, config=config)
        _running(project, hog.job_id, config)
        job = jobs.enqueue(project, "t.sleepy_once", {"seconds": 60}, config=config)
        _running(project, job.job_id, config)  # on the other worker: one slot each
        (victim,) = [w for w in workers if _holder(project, config, job.job_id, w)]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        ended = wait_until(
            lambda: (
                (j := _find(jobs.summarize(project, config=config), job.job_id)).is_terminal and j
            ),
            timeout=30,
            what="the surviving worker to fail the lost job",
        )
        survivor = jobs.summarize(project, config=config)
    finally:
        for w in workers:
            stop(w)
    assert ended.status == jobs.FAILED and ended.error_kind == "crashed"
    assert ended.worker_responsive is None
    assert _find(survivor, hog.job_id).status == jobs.RUNNING


def _find(page, job_id):
    return next(j for j in page if j.job_id == job_id)


def _holder(project, config, job_id, proc) -> bool:
    from tests.integration.workers import stored_record

    return f":{proc.pid}:" in (stored_record(project, config, job_id).get("runner_id") or "")


def test_a_silent_worker_is_reaped_by_its_beat_alone_and_fenced_when_it_wakes(
    cfg, project, tmp_path
):
    beat = ("--worker-beat-interval", "0.2", "--worker-stale", "1.5")
    config = _config(cfg, **SLOW_JOB_BEATS, worker_beat_interval_s=0.2, worker_stale_s=1.5)
    log, first_log = tmp_path / "sleepy.log", tmp_path / "first.log"
    job = jobs.enqueue(project, "t.sleepy", {"seconds": 2.0, "log": str(log)}, config=config)
    first = start_worker(
        project, database_url=cfg.database_url, extra=(*SLOW_JOB_FLAGS, *beat), log_path=first_log
    )
    try:
        _running(project, job.job_id, config)
        pause_outside_a_write(first, project, cfg)  # alive to the kernel: nothing proves it gone
        second = start_worker(
            project, database_url=cfg.database_url, extra=(*SLOW_JOB_FLAGS, *beat)
        )
        try:
            replaced = wait_until(
                lambda: (j := jobs.summarize(project, config=config)[0]).is_terminal and j,
                timeout=30,
                what="the job run again by the second worker",
            )
            assert replaced.status == jobs.SUCCEEDED and replaced.attempt == 2
            first.send_signal(signal.SIGCONT)
            wait_until(
                lambda: "is no longer current" in first_log.read_text(),
                timeout=30,
                what="the stale attempt's refused write",
            )
            final = jobs.summarize(project, config=config)[0]
            assert (final.attempt, final.run_id) == (2, replaced.run_id)
        finally:
            stop(second)
    finally:
        first.send_signal(signal.SIGCONT)
        stop(first)


def test_a_worker_paused_for_less_than_the_stale_window_keeps_its_job(cfg, project):
    beat = ("--worker-beat-interval", "0.2", "--worker-stale", "5")
    config = _config(cfg, **SLOW_JOB_BEATS, worker_beat_interval_s=0.2, worker_stale_s=5.0)
    job = jobs.enqueue(project, "t.sleepy", {"seconds": 1.5}, config=config)
    first = start_worker(project, database_url=cfg.database_url, extra=(*SLOW_JOB_FLAGS, *beat))
    second = start_worker(project, database_url=cfg.database_url, extra=(*SLOW_JOB_FLAGS, *beat))
    try:
        running = _running(project, job.job_id, config)
        holder = first if _holder(project, config, job.job_id, first) else second
        pause_outside_a_write(holder, project, cfg)
        time.sleep(1.0)  # the scenario: a pause shorter than the window (not a wait)
        paused = jobs.get_job(project, job.job_id, config=config)
        holder.send_signal(signal.SIGCONT)
        ended = wait_until(
            lambda: (j := jobs.get_job(project, job.job_id, config=config)).is_terminal and j,
            timeout=30,
            what="the job to finish",
        )
    finally:
        for w in (first, second):
            w.send_signal(signal.SIGCONT)
            stop(w)
    assert paused.status == jobs.RUNNING and paused.worker_responsive is True
    assert ended.status == jobs.SUCCEEDED and ended.attempt == 1 == running.attempt


@pytest.mark.postgres
def test_a_dropped_database_connection_reaps_no_live_job(project, tmp_path):
    """Every worker loses the database for longer than ``worker_stale_s``; when
    it comes back, all beats are old, and nobody may be judged dead for it."""
    from tests.conftest import purge_postgres_project, require_postgres
    from tests.integration.pg_proxy import relayed

    url = require_postgres()
    config = jobs.JobsConfig(database_url=url, **SLOW_JOB_BEATS)  # the default worker window
    flags = (*SLOW_JOB_FLAGS,)
    with relayed(url) as (relay, through):
        workers = [start_worker(project, database_url=through, extra=flags) for _ in range(2)]
        try:
            job = jobs.enqueue(project, "t.sleepy", {"seconds": 12}, config=config)
            _running(project, job.job_id, config)
            relay.cut()
            time.sleep(config.worker_stale_s + 2)  # the scenario: an outage past the window
            relay.restore()
            ended = wait_until(
                lambda: (j := jobs.summarize(project, config=config)[0]).is_terminal and j,
                timeout=60,
                what="the job to finish",
            )
        finally:
            relay.restore()
            for w in workers:
                stop(w)
            purge_postgres_project(project)
    assert ended.status == jobs.SUCCEEDED and ended.attempt == 1


@pytest.mark.postgres
def test_a_job_beat_the_outage_silenced_is_not_reaped_by_a_worker_back_first(project, tmp_path):
    """Each worker reaches the database through a relay of its own. Both lose it
    for longer than the job's heartbeat window and the worker window; the one
    that does not hold the job comes back first and judges the other's job,
    whose last heartbeat is now stale, before that worker could write another.
    Its own outage excuses the silence (the reaper's blind spell): the job runs
    on, once."""
    from tests.conftest import purge_postgres_project, require_postgres
    from tests.integration.pg_proxy import relayed

    url = require_postgres()
    beats = {"heartbeat_interval_s": 0.5, "heartbeat_stale_s": 5.0}  # default worker window
    flags = ("--heartbeat-interval", "0.5", "--heartbeat-stale", "5")
    config = jobs.JobsConfig(database_url=url, **beats)
    with relayed(url) as (holder_relay, holder_url), relayed(url) as (judge_relay, judge_url):
        holder = start_worker(
            project,
            max_concurrent=1,
            database_url=holder_url,
            extra=flags,
            log_path=tmp_path / "holder.log",
        )
        judge = None
        try:
            job = jobs.enqueue(project, "t.sleepy", {"seconds": 16}, config=config)
            _running(project, job.job_id, config)
            judge = start_worker(
                project,
                max_concurrent=1,
                database_url=judge_url,
                extra=flags,
                log_path=tmp_path / "judge.log",  # says what it reaped, if it does
            )
            wait_until(
                lambda: len(jobs.workers(project, config=config)) == 2,
                timeout=30,
                what="the second worker to beat",
            )
            holder_relay.cut()
            judge_relay.cut()
            outage = config.worker_stale_s + 3  # past both windows
            time.sleep(outage)  # the scenario: an outage (not a wait)
            judge_relay.restore()
            time.sleep(1.0)  # the scenario: the holder is back a second later
            holder_relay.restore()
            # summarize judges nobody: this process never lost the database, so it
            # would see the holder silent while the judge beats (a partition)
            ended = wait_until(
                lambda: (j := jobs.summarize(project, config=config)[0]).is_terminal and j,
                timeout=60,
                what="the job to finish",
            )
        finally:
            holder_relay.restore()
            judge_relay.restore()
            for w in (holder, judge):
                if w is not None:
                    stop(w)
            purge_postgres_project(project)
    assert ended.status == jobs.SUCCEEDED and ended.attempt == 1, ended.error
