"""Facade decisions on the test's thread: a fake clock, a registered kind, no worker.

A "worker" here is the test calling the store's ``claim`` and ``beat`` itself,
so what the facade decides (reap on read, re-run a dead duplicate, report
without reaping) is reached without threads, processes or polling.
"""

from __future__ import annotations

import dataclasses

import pytest

from nw import jobs
from nw.jobs.stores import shared_store

KIND = "u.facade"


@pytest.fixture
def config(cfg, clock):
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop")
    return dataclasses.replace(cfg, clock=clock)


def claim_and_go_silent(project, config, clock, job_id, *, runs_for=3.0, silent_for=60.0):
    store = shared_store(project, config, create=False)
    (row,) = store.claim([KIND], now=clock.now, runner_id="gone")
    assert row.record["job_id"] == job_id
    clock.advance(runs_for)
    store.beat([job_id], now=clock.now, runner_id="gone")
    clock.advance(silent_for)


def test_get_job_reaps_a_job_whose_worker_went_silent_and_summarize_only_reports(
    project, config, clock
):
    job = jobs.enqueue(project, KIND, {"i": 1}, config=config)
    claim_and_go_silent(project, config, clock, job.job_id)
    (seen,) = jobs.summarize(project, config=config)
    assert seen.status == jobs.RUNNING and seen.worker_responsive is False
    reaped = jobs.get_job(project, job.job_id, config=config)
    assert reaped.status == jobs.FAILED and reaped.grade == "error"
    assert reaped.error == "worker lost; its kind is not retried"
    assert reaped.elapsed_s == 3.0  # to its last beat, not to this read 60 s later
    assert reaped.worker_responsive is None


def test_list_jobs_reaps_too(project, config, clock):
    job = jobs.enqueue(project, KIND, {"i": 2}, config=config)
    claim_and_go_silent(project, config, clock, job.job_id)
    (listed,) = jobs.list_jobs(project, config=config)
    assert listed.status == jobs.FAILED and listed.error.startswith(jobs.REAPED_REASON)


def test_a_job_within_the_stale_window_is_left_running(project, config, clock):
    job = jobs.enqueue(project, KIND, {"i": 3}, config=config)
    claim_and_go_silent(project, config, clock, job.job_id, silent_for=0.5)
    got = jobs.get_job(project, job.job_id, config=config)
    assert got.status == jobs.RUNNING and got.worker_responsive is True


def test_enqueueing_again_a_job_whose_worker_died_runs_it_again(project, config, clock):
    first = jobs.enqueue(project, KIND, {"i": 4}, config=config)
    claim_and_go_silent(project, config, clock, first.job_id)
    again = jobs.enqueue(project, KIND, {"i": 4}, config=config)
    assert again.job_id == first.job_id
    assert again.status == jobs.QUEUED and again.run_id != first.run_id
    assert again.attempt == 0 and again.error is None


def test_enqueueing_again_a_live_job_answers_the_same_run(project, config, clock):
    first = jobs.enqueue(project, KIND, {"i": 5}, config=config)
    claim_and_go_silent(project, config, clock, first.job_id, silent_for=0.5)
    again = jobs.enqueue(project, KIND, {"i": 5}, config=config)
    assert again.status == jobs.RUNNING and again.run_id == first.run_id


def test_cancelling_a_queued_job_closes_it_at_once(project, config, clock):
    job = jobs.enqueue(project, KIND, {"i": 6}, config=config)
    clock.advance(2)
    got = jobs.cancel_job(project, job.job_id, config=config)
    assert got.status == jobs.CANCELLED and got.error_kind == "cancelled"
    assert got.queue_wait_s == 2.0
    store = shared_store(project, config, create=False)
    assert store.claim([KIND], now=clock.now, runner_id="w") == []  # it never runs


def test_reads_of_queued_jobs_share_one_replay_of_the_queue_a_second(
    project, config, clock, monkeypatch
):
    # Given a backlog of queued jobs and a count of the queue reads behind their ETAs
    queued = [jobs.enqueue(project, KIND, {"i": 100 + i}, config=config) for i in range(5)]
    store = shared_store(project, config, create=False)
    reads = []
    real = store.queue_ahead
    monkeypatch.setattr(store, "queue_ahead", lambda **kw: reads.append(1) or real(**kw))
    # When every job is read, several times, within one second
    for _ in range(3):
        for job in queued:
            jobs.get_job(project, job.job_id, config=config)
        jobs.list_jobs(project, status="queued", config=config)
    # Then the queue was read and replayed once
    assert len(reads) == 1
    # ... a job queued since is not answered from the old replay
    later = jobs.enqueue(project, KIND, {"i": 200}, config=config)
    jobs.get_job(project, later.job_id, config=config)
    assert len(reads) == 2
    # ... and a second on, the next read replays again
    clock.advance(1.0)
    jobs.get_job(project, queued[0].job_id, config=config)
    assert len(reads) == 3
