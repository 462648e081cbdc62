"""What a caller written against the seed's API (nw-jobs-api.txt) relies on."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from nw import jobs
from nw.jobs.stores import shared_store
from tests.helpers import wait_until


def _body_returned_after_the_request(project, cfg):
    started, cancelled = threading.Event(), threading.Event()

    def stubborn(project, params):  # never looks at should_cancel
        started.set()
        cancelled.wait(10)
        return {"rendered": True}

    job = jobs.enqueue(project, "r", {}, dispatch={"r": stubborn}, config=cfg)
    assert started.wait(5)
    jobs.cancel_job(project, job.job_id, config=cfg)
    cancelled.set()
    return job.job_id, cfg


def _body_raised_the_cancel_exception(project, cfg):
    started = threading.Event()

    def polite(project, params, *, should_cancel):
        started.set()
        while not should_cancel():
            time.sleep(0.01)
        raise jobs.JobCancelled("stopped at a boundary")

    job = jobs.enqueue(project, "r", {}, dispatch={"r": polite}, config=cfg)
    assert started.wait(5)
    jobs.cancel_job(project, job.job_id, config=cfg)
    return job.job_id, cfg


def _cancelled_while_queued(project, cfg):
    jobs.register_kind("seed.later", "tests.fixtures.bodies:noop")
    job = jobs.enqueue(project, "seed.later", {}, config=cfg)  # no worker: it waits
    jobs.cancel_job(project, job.job_id, config=cfg)
    return job.job_id, cfg


def _reaped_while_cancelling(project, cfg):
    jobs.register_kind("seed.lost", "tests.fixtures.bodies:noop", retryable=True, max_attempts=3)
    job = jobs.enqueue(project, "seed.lost", {}, config=cfg)
    store = shared_store(project, cfg, create=False)
    store.claim(["seed.lost"], now=cfg.clock(), runner_id="a-worker-that-dies")
    assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLING
    # the worker never beats again: read it once its beat is past the stale window
    later = dataclasses.replace(cfg, clock=lambda: time.time() + 10 * cfg.heartbeat_stale_s)
    return job.job_id, later


@pytest.mark.parametrize(
    ("how", "says"),
    [
        (_body_returned_after_the_request, "the body had already finished its work"),
        (_body_raised_the_cancel_exception, "stopped at a boundary"),
        (_cancelled_while_queued, "cancelled before start"),
        (_reaped_while_cancelling, "worker lost before the body stopped"),
    ],
    ids=["body-returned", "body-raised-cancel", "while-queued", "reaped-while-cancelling"],
)
def test_every_cancelled_job_has_error_kind_cancelled_however_it_stopped(project, cfg, how, says):
    job_id, read_with = how(project, cfg)
    done = wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=read_with)).is_terminal and j,
        what="the cancelled job to finish",
    )
    assert done.status == jobs.CANCELLED
    assert done.error_kind == "cancelled"
    assert says in done.error
