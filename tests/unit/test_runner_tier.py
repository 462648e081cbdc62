"""The in-process tier has one name; records stored under the old one still read."""

from __future__ import annotations

import pytest

from nw.jobs.core import liveness
from nw.jobs.core.liveness import WorkerSeen
from nw.jobs.core.model import RUNNER_INPROC, RUNNER_WORKER, JobsConfig

CFG = JobsConfig(heartbeat_interval_s=1.0, heartbeat_stale_s=10.0)
NOW = 1_000.0


@pytest.mark.parametrize("runner", [RUNNER_INPROC, "local"])
def test_a_queued_inprocess_job_dies_with_its_owner_whatever_name_it_was_stored_under(runner):
    # Given a job queued for an in-process body ("local": a record stored before the rename)
    record = {"runner": runner, "created_at": NOW - 100}
    assert liveness.runs_inproc(record)
    # When its owner's beat is stale, or the owner is gone, it is reaped
    assert liveness.should_reap("queued", record, NOW, CFG, held=False, worker=WorkerSeen(NOW - 60))
    assert liveness.should_reap("queued", record, NOW, CFG, held=False, worker=None)
    # And while its owner beats, or this process holds it, it is not
    beating = WorkerSeen(NOW - 1)
    assert not liveness.should_reap("queued", record, NOW, CFG, held=False, worker=beating)
    assert not liveness.should_reap("queued", record, NOW, CFG, held=True, worker=None)


def test_a_queued_worker_job_waits_for_a_worker_however_long():
    record = {"runner": RUNNER_WORKER, "created_at": NOW - 10_000}
    assert not liveness.runs_inproc(record)
    assert not liveness.should_reap("queued", record, NOW, CFG, held=False, worker=None)
