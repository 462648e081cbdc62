"""Reaping, driven on the test's thread: a real store, a fake clock, no worker."""

from __future__ import annotations

import pytest

from nw.jobs.core.liveness import WorkerSeen
from nw.jobs.core.model import JobsConfig
from nw.jobs.core.records import attempt_in_run
from nw.jobs.execution import recovery
from nw.jobs.execution.reaper import Reaper, RunnersRead
from tests.unit.conftest import T0, a_record

ID = "c" * 64


@pytest.fixture
def config(clock):
    return JobsConfig(
        clock=clock, heartbeat_interval_s=1, heartbeat_stale_s=10, retry_backoff_s=4.0
    )


def nobody(_job_id: str) -> bool:
    return False


def silent_worker(store, clock, seconds: float) -> float:
    """The worker beats once more, then stops; returns the time of its last beat."""
    clock.advance(3)
    store.beat([ID], now=clock.now, runner_id="w1")
    last = clock.now
    clock.advance(seconds)
    return last


def test_a_live_worker_is_not_reaped(store, clock, claimed, config):
    claimed(ID)
    silent_worker(store, clock, 9)  # under heartbeat_stale_s
    assert recovery.reap_stale(store, clock.now, config, nobody) == []
    assert store.get(ID).status.value == "running"


def test_a_job_held_in_this_process_is_not_reaped_however_old_its_beat(
    store, clock, claimed, config
):
    claimed(ID)
    silent_worker(store, clock, 1000)
    assert recovery.reap_stale(store, clock.now, config, lambda _id: True) == []
    assert store.get(ID).status.value == "running"


def test_a_lost_job_that_cannot_retry_fails_at_its_last_heartbeat(store, clock, claimed, config):
    claimed(ID)
    last = silent_worker(store, clock, 60)
    assert recovery.reap_stale(store, clock.now, config, nobody) == [ID]
    got = store.get(ID)
    assert got.status.value == "failed"
    assert got.record["error"] == "worker lost; its kind is not retried"
    assert got.record["error_kind"] == "crashed"
    assert got.record["finished_at"] == last  # not the reap's time, 60 s later
    assert got.record["finished_at"] - got.record["started_at"] == 3


def test_a_lost_job_with_attempts_left_says_so_and_is_due_at_once(store, clock, claimed, config):
    claimed(ID, retryable=True, max_attempts=2)
    silent_worker(store, clock, 60)
    assert recovery.reap_stale(store, clock.now, config, nobody) == [ID]
    back = store.get(ID)
    assert back.status.value == "queued"
    assert back.record["error"] == "worker lost; retrying as attempt 2"
    assert store.claim(["render"], now=clock.now - 0.01, runner_id="w2") == []
    (again,) = store.claim(["render"], now=clock.now, runner_id="w2")  # no backoff
    assert attempt_in_run(again.record) == 2
    # the second worker is lost too: no attempts left
    clock.advance(4.0)
    store.beat([ID], now=clock.now, runner_id="w2")
    clock.advance(60)
    assert recovery.reap_stale(store, clock.now, config, nobody) == [ID]
    ended = store.get(ID)
    assert ended.status.value == "failed"
    assert ended.record["error"] == "worker lost; no attempts left"


def test_a_job_lost_while_cancelling_ends_cancelled(store, clock, claimed, config):
    claimed(ID, retryable=True, max_attempts=3)
    store.request_cancel(ID, now=clock.now)
    assert store.get(ID).status.value == "cancelling"
    silent_worker(store, clock, 60)
    assert recovery.reap_stale(store, clock.now, config, nobody) == [ID]
    got = store.get(ID)
    assert got.status.value == "cancelled" and got.record["error_kind"] == "cancelled"
    assert got.record["error"] == "worker lost before the body stopped; cancelled on request"


def test_a_reap_of_an_attempt_that_moved_on_writes_nothing(store, clock, claimed, config):
    row = claimed(ID, retryable=True, max_attempts=3)
    silent_worker(store, clock, 60)
    # another reaper got there first and the job was claimed again
    assert recovery.reap(store, row, clock.now, config)
    clock.advance(10)
    store.claim(["render"], now=clock.now, runner_id="w2")
    assert not recovery.reap(store, row, clock.now, config)  # the stale row is fenced out
    assert store.get(ID).record["runner_id"] == "w2"


def test_maybe_reap_returns_the_row_as_it_now_reads(store, clock, claimed, config):
    row = claimed(ID)
    assert recovery.maybe_reap(store, row, clock.now, config, nobody) is row  # alive
    silent_worker(store, clock, 60)
    after = recovery.maybe_reap(store, store.get(ID), clock.now, config, nobody)
    assert after.status.value == "failed"


def test_a_job_queued_in_process_by_a_process_that_is_gone_is_closed(store, clock, config):
    store.register_runner("gone", {"role": "inproc"}, now=clock.now)
    store.create(a_record(ID, at=clock.now, runner="local", runner_id="gone"), claimable=False)
    clock.advance(5)
    assert recovery.reap_stale(store, clock.now, config, nobody) == []  # its owner beat 5 s ago
    clock.advance(60)
    assert recovery.reap_stale(store, clock.now, config, nobody) == [ID]
    got = store.get(ID)
    assert got.status.value == "failed"
    assert got.record["error"].startswith("worker lost before it started")
    assert got.record["finished_at"] == clock.now - 65  # its owner's last beat


# ----- a worker's reaper, fed the reads its beats made ------------------------------


def _read(clock, mono: float) -> RunnersRead:
    """The runners as a beat at ``mono`` (monotonic seconds) read them: w1, its
    job's worker, silent since the start; w2, the reader, beating now."""
    rows = [
        {"runner_id": "w1", "role": "worker", "started_at": T0, "beat_at": T0},
        {"runner_id": "w2", "role": "worker", "started_at": T0, "beat_at": clock.now},
    ]
    return RunnersRead(rows, asked=mono - 0.01, answered=mono, now=clock.now)


@pytest.mark.parametrize("outage", [False, True])
def test_a_failed_beat_makes_the_reaper_wait_before_it_judges_silence(
    store, clock, claimed, outage
):
    # Given a job whose worker went silent long ago (job heartbeats an hour
    # apart: only the worker's silence can tell), judged by another's reaper
    config = JobsConfig(clock=clock, heartbeat_interval_s=3600, heartbeat_stale_s=7200)
    reaper = Reaper(store, config, nobody)
    claimed(ID)
    clock.advance(100)
    reaped = []
    for mono in range(8):  # prompt reads, one a second, for longer than worker_stale_s
        if outage and mono == 5:
            reaper.unreachable(at=mono - 0.5)  # a beat failed: the store was out of reach
        reaped += reaper.tick(read=_read(clock, float(mono)))
        clock.advance(1)
    # Then the silence counts only after worker_stale_s of reads since the last failure
    assert reaped == ([] if outage else [ID])
    assert store.get(ID).status.value == ("running" if outage else "failed")  # not retryable


# ----- blind spells: an outage the reaper lived through judges nobody ---------------


def test_silence_counts_only_outside_the_readers_blind_spells():
    seen = WorkerSeen(beat_at=100.0, others_at=200.0, blind=((110.0, 130.0), (150.0, 155.0)))
    assert seen.outside_blind(100.0, 200.0) == 75.0  # 100 s less the 20 s and 5 s spells
    assert seen.outside_blind(120.0, 152.0) == 32.0 - 10.0 - 2.0  # spells cut at the ends
    assert seen.silent_s(100.0, 1000.0) == 75.0  # the others' beats still bound it
    assert seen.unproved(100.0, 180.0, 60.0)  # 80 s silent, 55 s of it proved
    assert not seen.unproved(100.0, 190.0, 60.0)
    assert not WorkerSeen(beat_at=100.0).unproved(100.0, 160.0, 60.0)  # no spell: as before


def _outage(store, clock, how: str, config: JobsConfig) -> tuple[Reaper, list[str]]:
    """w1 holds the job and w2's reaper judges it; the store is out of reach
    for 15 s (longer than ``heartbeat_stale_s``), and nobody can beat then.
    Returns the reaper and what it reaped on its first prompt read after."""
    reaper = Reaper(store, config, nobody, started=clock.now)
    reaped: list[str] = []
    if how != "boot":  # at boot, its first read comes after the outage
        reaped += reaper.tick(read=_read(clock, 0.0))
    clock.advance(1)
    if how == "failed beat":
        reaper.unreachable(at=1.0)
    clock.advance(15)
    if how == "slow read":  # the read waited the outage out in its retries
        slow = _read(clock, 16.0)
        reaped += reaper.tick(read=RunnersRead(slow.rows, 1.0, 16.0, clock.now - 15))
    # ("late read": a beat that waited it out and read nothing; the reaper's
    # next read is prompt, but the first in 17 s)
    reaped += reaper.tick(read=_read(clock, 17.0))  # a full pass: a second after the last
    return reaper, reaped


@pytest.mark.parametrize("how", ["failed beat", "slow read", "late read", "boot"])
def test_a_job_beat_the_outage_silenced_is_not_reaped(store, clock, claimed, config, how):
    # Given a job whose heartbeat (stale after 10 s) was last written before a 15 s
    # outage that the judging reaper lived through (or booted into)
    claimed(ID)
    reaper, reaped = _outage(store, clock, how, config)
    # Then its silence is not held against it: nobody could write a beat then
    assert reaped == [] and store.get(ID).status.value == "running"
    # And a worker that never beats again is still found, once the reads since
    # the outage prove it silent
    for mono in range(18, 31):
        clock.advance(1)
        reaped += reaper.tick(read=_read(clock, float(mono)))
    assert reaped == [ID] and store.get(ID).status.value == "failed"


def test_a_job_beat_stale_before_the_outage_is_reaped_after_it(store, clock, claimed, config):
    # Given a job whose worker was silent for 20 s before the outage began (and
    # the reaper booted into)
    claimed(ID)
    clock.advance(20)
    _reaper, reaped = _outage(store, clock, "boot", config)
    # Then the spell excuses none of that: it is reaped on the first read after
    assert reaped == [ID]
