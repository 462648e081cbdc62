"""Worker decisions without its loop: claims and a shutdown, driven on the test's thread."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time

import pytest
from au import ComputationStatus

from nw import jobs
from nw.jobs.core.errors import JobStoreUnreachable
from nw.jobs.core.outcome import Ended, Ending, RetryPolicy, decide
from nw.jobs.execution.body import Launch
from nw.jobs.execution.reaper import Reaper, RunnersRead
from nw.jobs.execution.runtime import beat_rest
from nw.jobs.execution.worker import Worker
from nw.jobs.stores import open_store
from tests.conftest import purge_postgres_project, require_postgres
from tests.helpers import wait_until

KIND = "u.worker"


@pytest.fixture
def worker(project, cfg, clock):
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop", retryable=True, max_attempts=2)
    w = Worker([project], config=dataclasses.replace(cfg, clock=clock), kinds_=[KIND])
    yield w
    _close(w)


def _close(w: Worker) -> None:
    w.stopping.set()
    for rt in w.runtimes:
        rt.close(wait=False)
    w._reaping.close()
    with contextlib.suppress(OSError):  # a test that drained it closed these already
        w._listener.close()
        w._poker.close()


def test_a_reap_that_takes_long_never_holds_up_the_workers_own_beat(project, cfg, monkeypatch):
    # Given a reap that lasts until the test ends (a dead worker's many jobs, a
    # store in retries)
    entered, release = threading.Event(), threading.Event()

    def stuck(self, full, read):
        entered.set()
        release.wait(30)
        return []

    monkeypatch.setattr(Reaper, "_tick", stuck)
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop", retryable=True, max_attempts=2)
    fast = {"worker_beat_interval_s": 0.02, "worker_stale_s": 0.2}
    w = Worker([project], config=dataclasses.replace(cfg, **fast), kinds_=[KIND])
    try:
        (rt,) = w.runtimes
        assert entered.wait(10), "a beat never fed the reaper"
        # Then the worker goes on beating while its reaper is stuck: others
        # judge it by that beat, and silence would get its jobs reaped
        beats: set[float] = set()

        def beat_at() -> float:
            (me,) = [r for r in rt.store.runners() if r["runner_id"] == w.runner_id]
            return me["beat_at"]

        wait_until(
            lambda: beats.add(beat_at()) or len(beats) >= 5,
            what="five beats while a reap is stuck",
        )
    finally:
        release.set()
        _close(w)


def test_each_beat_is_the_reapers_read_of_the_runners(project, cfg, clock, monkeypatch):
    # Given a job claimed by a worker that then fell silent, long ago
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop", retryable=True, max_attempts=2)
    job = jobs.enqueue(project, KIND, {"i": 1}, config=dataclasses.replace(cfg, clock=clock))
    store = open_store(project, cfg, create=True)
    store.register_runner("w-silent", {"role": "worker"}, now=clock.now)
    assert store.claim([KIND], now=clock.now, runner_id="w-silent", limit=1)
    clock.advance(100.0)
    # When a worker that beats every 20 ms serves the project, its loop never run
    # (job heartbeats ten minutes apart: only the silent worker's beat can tell)
    fast = {"worker_beat_interval_s": 0.02, "worker_stale_s": 0.2}
    fast |= {"heartbeat_interval_s": 600.0, "heartbeat_stale_s": 1200.0}
    w = Worker([project], config=dataclasses.replace(cfg, clock=clock, **fast), kinds_=[KIND])
    try:
        reads = []  # the reaper may not read the runners on its own
        monkeypatch.setattr(RunnersRead, "of", classmethod(lambda *a: reads.append(a)))
        # Then its beats alone find the silent worker and put the job back
        back = wait_until(
            lambda: (r := store.get(job.job_id)).status.value == "queued" and r,
            what="the silent worker's job reaped by the other's beats",
        )
    finally:
        _close(w)
    assert back.record["attempt"] == 1 and not reads


def test_a_body_still_running_after_the_grace_goes_back_without_spending_an_attempt(
    project, worker, clock
):
    job = jobs.enqueue(project, KIND, {"i": 1}, config=worker.config)
    (rt,) = worker.runtimes
    (row,) = rt.store.claim([KIND], now=clock.now, runner_id=worker.runner_id)
    assert worker._put_back(rt, job.job_id) == 1
    back = jobs.get_job(project, job.job_id, config=worker.config)
    assert back.status == jobs.QUEUED and back.error is None and back.attempt == 0
    (again,) = rt.store.claim([KIND], now=clock.now, runner_id="w2")
    assert again.record["attempt"] == row.record["attempt"] + 1  # a new lease ...
    assert jobs.get_job(project, job.job_id, config=worker.config).attempt == 1  # ... same try
    # now w2's: a stopping worker that still lists it never puts it back
    assert worker._put_back(rt, job.job_id) == 0
    assert jobs.get_job(project, job.job_id, config=worker.config).status == jobs.RUNNING


def test_the_stop_log_counts_every_job_put_back(project, worker, clock, caplog):
    stopped = decide(
        Ending(Ended.STOPPED, clock.now), {"attempt": 1}, RetryPolicy(True, 2, 1.0),
        now=clock.now, cancel_requested=False,
    )  # fmt: skip
    worker.stopping.set()
    for n, decided in enumerate((stopped, None)):
        launch = Launch(fn=lambda p, q: None, project=project)
        launch.decided = decided
        worker._launches[f"{n:064x}"] = launch
        worker._released(f"{n:064x}")
    assert worker.stopped_back == 1  # the launch that ended otherwise is not counted
    with caplog.at_level(logging.INFO, logger="nw.jobs.worker"):
        assert worker._drain() == 0
    assert "1 job(s) requeued (1 stopped at a boundary, 0 still running" in caplog.text


def test_a_job_that_cannot_launch_fails_and_frees_its_slot(project, worker, clock):
    jobs.register_kind("u.missing", "tests.fixtures.no_such_module:render")
    worker._kinds = ["u.missing"]
    job = jobs.enqueue(project, "u.missing", {}, config=worker.config)
    assert worker.claim_once() == 1
    failed = _wait_ended(project, worker, job.job_id, "the job that cannot launch, failed")
    assert failed.status == jobs.FAILED and "no_such_module" in failed.error
    wait_until(lambda: worker.busy == 0, what="its slot let go once the failure is written")


def test_a_job_its_pool_refuses_is_retried_as_its_kind_says_and_frees_its_slot(
    project, worker, clock, monkeypatch
):
    # Given a runtime whose pool refuses work (shut down under the worker), and
    # a retryable kind with two attempts
    (rt,) = worker.runtimes

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot schedule new futures after shutdown")

    monkeypatch.setattr(rt.backend, "launch", refuse)
    job = jobs.enqueue(project, KIND, {"refused": 1}, config=worker.config)
    # When the worker claims it, its launch fails after the runtime took it
    assert worker.claim_once() == 1
    # Then the failed launch spent attempt 1 and the job is queued again, after
    # its backoff, its attempt closed with the error
    back = wait_until(
        lambda: (
            (j := jobs.get_job(project, job.job_id, config=worker.config)).status == jobs.QUEUED
            and j
        ),
        what="the job its pool refused, queued again",
    )
    assert "cannot schedule" in back.error and back.error_kind == "crashed"
    (first,) = back.attempts
    assert first["ended"] == "requeued" and "cannot schedule" in first["error"]
    wait_until(lambda: worker.busy == 0, what="the refused job's slot let go")
    assert worker.claim_once() == 0  # not due before its backoff
    # And the second failed launch, its last attempt, fails the job
    clock.advance(60.0)
    assert worker.claim_once() == 1
    failed = _wait_ended(project, worker, job.job_id, "the job its pool refused, failed")
    assert failed.status == jobs.FAILED and "cannot schedule" in failed.error
    assert failed.attempt == 2 and [a["ended"] for a in failed.attempts] == ["requeued", "failed"]
    # Then no slot stays taken: not the worker's, not the runtime's
    wait_until(lambda: worker.busy == 0, what="the refused job's slot let go")
    assert rt.held_jobs() == [] and rt.wait_idle(timeout=0)


@pytest.mark.parametrize("taken_first", [False, True], ids=["failure-first", "taken-first"])
def test_a_launch_a_pool_queued_then_failed_runs_or_fails_never_both(
    project, worker, tmp_path, taken_first
):
    # Given a pool that queues the task, then cannot start a thread for it;
    # its queued task runs after the failure is handled, or before
    (rt,) = worker.runtimes
    pool = rt.backend._pool
    real_submit, real_next = pool.submit, rt.backend._next
    go, ran_next = threading.Event(), threading.Event()

    def queued_task():
        go.wait(10)
        try:
            real_next()
        finally:
            ran_next.set()

    def queued_then_failed(fn, *args, **kwargs):
        real_submit(queued_task)
        if taken_first:
            go.set()
            assert ran_next.wait(10)
        raise RuntimeError("can't start new thread")

    pool.submit = queued_then_failed
    log = tmp_path / "ran.log"
    jobs.register_kind("u.once", "tests.fixtures.bodies:noop")  # a failure is not retried
    worker._kinds = ["u.once"]
    job = jobs.enqueue(project, "u.once", {"log": str(log), "i": 7}, config=worker.config)
    try:
        assert worker.claim_once() == 1
        go.set()
        assert ran_next.wait(10), "the queued pool task never ran"
        ended = _wait_ended(project, worker, job.job_id, "the job whose launch failed")
        wait_until(lambda: worker.busy == 0, what="its slot let go")
    finally:
        pool.submit = real_submit
    if taken_first:  # a thread took it before the failure came back: it ran, once
        assert ended.status == jobs.SUCCEEDED and log.read_text().split() == ["7"]
    else:  # taken back before any thread: failed, and its body never ran
        assert ended.status == jobs.FAILED and "can't start new thread" in ended.error
        assert not log.exists()


def test_a_stopping_worker_leaves_a_job_whose_outcome_is_on_its_way(project, worker, clock):
    # Given two jobs of this worker still held after the grace period, running
    # in the store; one's body has returned and handed its outcome over (the
    # write not answered yet), the other's body is still running
    (rt,) = worker.runtimes
    for i in range(2):
        jobs.enqueue(project, KIND, {"i": i}, config=worker.config)
    rows = rt.store.claim([KIND], now=clock(), runner_id=worker.runner_id, limit=2)
    handed, running = (row.record["job_id"] for row in rows)
    for job_id in (handed, running):
        worker._launches[job_id] = Launch(fn=lambda p, params: None, project=project)
    worker._launches[handed].handed_over = True
    # When the worker puts back what outlived the grace
    # Then only the one still running goes back: the other's own write decides
    assert worker._put_back(rt, handed) == 0
    assert worker._put_back(rt, running) == 1
    assert jobs.get_job(project, handed, config=worker.config).status == jobs.RUNNING
    assert jobs.get_job(project, running, config=worker.config).status == jobs.QUEUED


def test_a_job_its_pool_refuses_holds_no_slot_of_an_in_process_runtime(worker, monkeypatch):
    (rt,) = worker.runtimes

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot schedule new futures after shutdown")

    monkeypatch.setattr(rt.backend, "launch", refuse)
    for due in (None, 0.0):  # launched now (a due time already past launches now too)
        with pytest.raises(RuntimeError, match="cannot schedule"):
            rt.submit("f" * 64, Launch(fn=lambda p, params: None, project=None), not_before=due)
        assert rt.busy == 0 and rt.held_jobs() == [] and rt.wait_idle(timeout=0)


def test_the_secrets_provider_runs_on_the_bodys_thread_never_the_claims(project, cfg, clock):
    # A provider may block (a vault over the network): the thread that claims
    # (the loop's, or a committer's launching a refill) must not wait on it.
    jobs.register_kind("u.secret", "tests.fixtures.bodies:secret")
    asked = []

    def provider(kind, params):
        asked.append(threading.current_thread())
        if params.get("broken"):
            raise RuntimeError("vault unreachable")
        return {"fal": "key-123"}

    w = Worker([project], config=dataclasses.replace(cfg, clock=clock), secrets=provider)
    try:
        w._kinds = ["u.secret"]
        good = jobs.enqueue(project, "u.secret", {}, config=w.config)
        assert w.claim_once() == 1
        ok = _wait_ended(project, w, good.job_id, "the job with secrets")
        assert ok.result == {"names": ["fal"], "fal_len": len("key-123")}
        broken = jobs.enqueue(project, "u.secret", {"broken": True}, config=w.config)
        assert w.claim_once() == 1
        without = _wait_ended(project, w, broken.job_id, "the job whose provider failed")
        assert without.result == {"names": [], "fal_len": 0}  # it ran, without secrets
    finally:
        _close(w)
    assert len(asked) == 2 and threading.current_thread() not in asked


def test_slots_a_refill_in_flight_asked_for_are_taken_until_it_answers(project, worker, clock):
    # Given a worker with a backlog and every slot free
    (rt,) = worker.runtimes
    cap = worker.config.max_concurrent
    worker._backlog = True
    # When a batch of finishes asks for the free slots and its claim is in flight,
    # a second batch (the other lane) and the worker's own claim find none free
    assert worker._refill_want([]) == cap
    assert worker._refill_want([]) == 0
    assert worker.busy == cap
    jobs.enqueue(project, KIND, {"i": 1}, config=worker.config)
    assert worker.claim_once() == 0
    # Then a claim that was not made gives its slots back, the backlog as it was
    worker._take(rt, None, cap)
    assert worker.busy == 0 and worker._backlog
    # And a claim that came back short gives back what it did not fill
    assert worker._refill_want([]) == cap
    worker._take(rt, [], cap)
    assert worker.busy == 0 and not worker._backlog  # fewer than asked: the queue is empty


# ----- a claim whose answer was lost (PostgreSQL: the database went away after it committed)
def _lose_the_answer_once(store, monkeypatch, statement: str) -> list[str]:
    """The next ``statement`` (a named operation) commits, then its caller hears
    only that the database is unreachable (the reply lost, the retries given up)."""
    real, lost = store.db.run, []

    def run(fn, *, what: str):
        result = real(fn, what=what)
        if what == statement and not lost:
            lost.append(what)
            raise JobStoreUnreachable(f"job store: {what} failed: the database is unreachable")
        return result

    monkeypatch.setattr(store.db, "run", run)
    return lost


def _wait_put_back(project, w: Worker, job_id: str) -> None:
    back = wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=w.config)).status == jobs.QUEUED and j,
        what="the job a lost claim took, put back by a beat",
    )
    assert back.attempt == 0  # its attempt given back


@pytest.fixture
def pg_worker(project, clock):
    cfg = jobs.JobsConfig(database_url=require_postgres(), clock=clock)
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop")  # one attempt: a loss would fail it
    w = Worker([project], config=cfg, kinds_=[KIND])
    yield w
    _close(w)
    purge_postgres_project(project)


@pytest.fixture
def lost_job(project, pg_worker, monkeypatch):
    """A queued job that a claim of the worker took, the claim's answer lost."""
    (rt,) = pg_worker.runtimes
    job = jobs.enqueue(project, KIND, {"i": 1}, config=pg_worker.config)
    lost = _lose_the_answer_once(rt.store, monkeypatch, "claim")
    assert pg_worker.claim_once() == 0 and lost
    taken = rt.store.get(job.job_id)
    assert taken.status.value == "running" and taken.record["runner_id"] == pg_worker.runner_id
    return job


def _wait_ended(project, w: Worker, job_id: str, what: str):
    return wait_until(
        lambda: (
            (j := jobs.get_job(project, job_id, config=w.config)).status in jobs.TERMINAL_STATUSES
            and j
        ),
        what=what,
    )


@pytest.mark.postgres
def test_jobs_a_claim_took_while_its_answer_was_lost_go_back_and_run(project, pg_worker, lost_job):
    # Given a job a claim took while its answer was lost
    # When the worker beats, the database back, then claims again
    _wait_put_back(project, pg_worker, lost_job.job_id)
    pg_worker.claim_once()
    # Then the job it took blind went back to the queue and ran, on its first attempt
    done = _wait_ended(project, pg_worker, lost_job.job_id, "the job a lost claim took, run")
    assert done.status == jobs.SUCCEEDED and done.attempt == 1
    # and its history says the blind claim never ran it, then the run that did
    assert [(a["attempt"], a["ended"]) for a in done.attempts] == [
        (1, "not started"),
        (1, "succeeded"),
    ]


@pytest.mark.postgres
def test_jobs_a_refill_took_while_its_answer_was_lost_go_back_and_run(
    project, pg_worker, monkeypatch
):
    # Given a job running (claimed by the worker) and one queued behind it
    w = pg_worker
    (rt,) = w.runtimes
    first = jobs.enqueue(project, KIND, {"i": 1}, config=w.config)
    second = jobs.enqueue(project, KIND, {"i": 2}, config=w.config)
    (row,) = rt.store.claim([KIND], now=w.config.clock(), runner_id=w.runner_id, limit=1)
    assert row.record["job_id"] == first.job_id
    # When its finish, which claims the next job in its slot, commits but its
    # answer never comes
    w._backlog = True
    lost = _lose_the_answer_once(rt.store, monkeypatch, "finish_many_and_claim")
    with pytest.raises(JobStoreUnreachable):
        rt.store.finish(
            first.job_id,
            au_status=ComputationStatus.COMPLETED,
            result={"ok": 1},
            error=None,
            fields={"finished_at": w.config.clock()},
            attempt=row.record["attempt"],
        )
    assert lost and rt.store.get(second.job_id).status.value == "running"
    assert w.busy == 0  # the refill was answered: no slot stays reserved
    # Then its next beat puts the job the refill took blind back, and it runs
    _wait_put_back(project, w, second.job_id)
    w.claim_once()
    done = _wait_ended(project, w, second.job_id, "the job a lost refill took, run")
    assert done.status == jobs.SUCCEEDED and done.attempt == 1


@pytest.mark.postgres
def test_a_stopping_worker_puts_back_what_a_lost_claim_took(project, pg_worker, lost_job):
    # Given a job a claim took while its answer was lost
    # When the worker stops before it claims again
    pg_worker.stopping.set()
    assert pg_worker._drain() == 0
    # Then the job is back in the queue, its attempt not spent
    back = jobs.get_job(project, lost_job.job_id, config=pg_worker.config)
    assert back.status == jobs.QUEUED and back.attempt == 0


@pytest.mark.postgres
def test_a_job_a_lost_claim_took_and_a_person_cancelled_ends_cancelled(
    project, pg_worker, lost_job
):
    # Given a job a claim took while its answer was lost, cancelled meanwhile
    jobs.cancel_job(project, lost_job.job_id, config=pg_worker.config)
    # Then the worker's next beat ends it cancelled: no body ever ran it
    ended = _wait_ended(
        project, pg_worker, lost_job.job_id, "the cancelled job a lost claim took, ended"
    )
    assert ended.status == jobs.CANCELLED


@pytest.mark.postgres
def test_a_workers_body_thread_is_free_before_its_finish_commits_but_not_its_slot(
    project, clock, monkeypatch
):
    # Given a one-slot worker whose finishes are held before they commit
    cfg = jobs.JobsConfig(database_url=require_postgres(), clock=clock, max_concurrent=1)
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop")
    w = Worker([project], config=cfg, kinds_=[KIND])
    try:
        (rt,) = w.runtimes
        first = jobs.enqueue(project, KIND, {"i": 1}, config=cfg)
        second = jobs.enqueue(project, KIND, {"i": 2}, config=cfg)
        entered, release = threading.Event(), threading.Event()
        real = rt.store._finish_many

        def held(items):
            entered.set()
            assert release.wait(10), "the test never let the commit go"
            return real(items)

        monkeypatch.setattr(rt.store._finishes, "_flush", held)
        assert w.claim_once() == 1
        assert entered.wait(10), "the first body's finish never reached the store"
        # Then its slot is still taken (the finish is not committed) ...
        assert w.busy == 1 and rt.store.get(first.job_id).status.value == "running"
        # ... while its thread already ran the next job claimed into the pool
        (row,) = rt.store.claim([KIND], now=clock.now, runner_id=w.runner_id, limit=1)
        rt.run_claimed(row, Launch(fn=lambda p, q: {"ok": 2}, project=project))
        wait_until(lambda: len(rt.store._finishes._queue) == 1, what="the second finish queued")
        assert w.busy == 2  # neither job is let go before its finish commits
        release.set()
        for job in (first, second):
            _wait_ended(project, w, job.job_id, "both finishes committed")
        wait_until(lambda: w.busy == 0, what="both slots let go once committed")
    finally:
        _close(w)
        purge_postgres_project(project)


@pytest.mark.postgres
def test_an_in_process_body_thread_waits_for_its_commit_before_the_next_job_starts(
    project, clock, monkeypatch
):
    from nw.jobs.execution.runtime import Runtime
    from nw.jobs.stores.postgres import PostgresJobStore
    from tests.contract.test_store_contract import record

    # Given an in-process runtime of one thread, two jobs queued for it, and a
    # commit of the first's finish that waits (up to a second) for the second to run
    cfg = jobs.JobsConfig(database_url=require_postgres(), clock=clock, max_concurrent=1)
    store = PostgresJobStore(cfg.database_url, project.project_id)
    rt = Runtime(store, cfg)
    second_ran, seen = threading.Event(), []
    real = store._finish_many

    def commit(items):
        if not seen:
            seen.append(second_ran.wait(1.0))  # a deadline: the second must not run
        return real(items)

    monkeypatch.setattr(store._finishes, "_flush", commit)
    try:
        ids = []
        for i, fn in enumerate([lambda p, q: {"ok": 1}, lambda p, q: second_ran.set()]):
            row, _ = store.create(record(at=clock.now + i), claimable=False)
            ids.append(row.record["job_id"])
            rt.submit(ids[-1], Launch(fn=fn, project=project))
        assert rt.wait_idle(timeout=10)
        # Then the second ran only once the first's outcome was committed
        assert seen == [False]
        assert [store.get(i).status.value for i in ids] == ["succeeded", "succeeded"]
    finally:
        rt.close(wait=False)
        purge_postgres_project(project)


@pytest.mark.postgres
def test_a_refilled_job_that_cannot_launch_fails_without_stalling_the_finishes(project, clock):
    # Given a worker running a job, and behind it a job of a kind that cannot load
    cfg = jobs.JobsConfig(database_url=require_postgres(), clock=clock, max_concurrent=1)
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop")
    jobs.register_kind("u.missing", "tests.fixtures.no_such_module:render")
    w = Worker([project], config=cfg, kinds_=[KIND, "u.missing"])
    try:
        (rt,) = w.runtimes
        first = jobs.enqueue(project, KIND, {"i": 1}, config=cfg)
        broken = jobs.enqueue(project, "u.missing", {}, config=cfg)
        (row,) = rt.store.claim([KIND], now=clock.now, runner_id=w.runner_id, limit=1)
        assert row.record["job_id"] == first.job_id
        # When the first finishes and its refill claims the broken one in its slot
        w._backlog = True
        written = rt.store.finish_soon(
            first.job_id,
            au_status=ComputationStatus.COMPLETED,
            result={"ok": 1},
            error=None,
            fields={"finished_at": clock.now},
            attempt=row.record["attempt"],
        )
        # Then the finish is answered, the broken job failed, and its slot is free
        assert written.result(10) is True
        failed = _wait_ended(project, w, broken.job_id, "the job that cannot launch, failed")
        assert failed.status == jobs.FAILED and "no_such_module" in failed.error
        wait_until(lambda: w.busy == 0, what="the slot let go")
    finally:
        _close(w)
        purge_postgres_project(project)


@pytest.mark.postgres
def test_a_claim_made_when_the_beat_is_half_due_carries_it(project, clock):
    # Given a PostgreSQL worker whose beat thread beats every ten minutes, its
    # last beat six minutes ago (half due), and a queued job
    cfg = jobs.JobsConfig(
        database_url=require_postgres(),
        clock=clock,
        worker_beat_interval_s=600.0,
        worker_stale_s=3600.0,
        heartbeat_interval_s=600.0,
        heartbeat_stale_s=3600.0,
    )
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop")
    w = Worker([project], config=dataclasses.replace(cfg, max_concurrent=1), kinds_=[KIND])
    try:
        (rt,) = w.runtimes
        heard: list[RunnersRead] = []
        rt.on_beat = heard.append
        rt._beat_at -= 360.0
        jobs.enqueue(project, KIND, {"i": 1}, config=cfg)
        clock.advance(5.0)

        def my_beat() -> float:
            (me,) = [r for r in rt.store.runners() if r["runner_id"] == w.runner_id]
            return me["beat_at"]

        # When it claims a job
        assert w.claim_once() == 1
        # Then the claim beat for it: the table says so, the listener (the
        # reaper's feed) heard the read, and the next beat is a whole interval away
        assert my_beat() == clock.now
        assert [[r["beat_at"] for r in h.rows if r["runner_id"] == w.runner_id] for h in heard] == [
            [clock.now]
        ]
        assert not rt.beat_may_ride()
        # and a claim right after it does not beat again
        wait_until(lambda: w.busy == 0, what="the first job done")
        jobs.enqueue(project, KIND, {"i": 2}, config=cfg)
        clock.advance(5.0)
        assert w.claim_once() == 1
        assert my_beat() == clock.now - 5.0 and len(heard) == 1
    finally:
        _close(w)
        purge_postgres_project(project)


def test_the_beat_thread_waits_for_whichever_beat_falls_due_first():
    # the runner's beat due in 0.4 s, the jobs' in 5 s: wait 0.4 s, then the runner's
    assert beat_rest(10.0, runner_due=10.4, jobs_due=15.0) == (pytest.approx(0.4), False)
    # a claim carried the runner's beat: the wait runs from it
    assert beat_rest(10.0, runner_due=11.0, jobs_due=15.0) == (1.0, False)
    # the runner's beat due: now
    assert beat_rest(10.0, runner_due=9.0, jobs_due=15.0) == (0.0, False)
    # the jobs' beat comes first (runner beats kept riding claims): wait for it, then beat them
    assert beat_rest(14.5, runner_due=15.4, jobs_due=15.0) == (0.5, False)
    assert beat_rest(15.0, runner_due=15.4, jobs_due=15.0) == (0.0, True)


def test_a_beat_that_rode_a_claim_ends_an_outage_so_the_next_failure_is_logged(
    project, sqlite_cfg, caplog, monkeypatch
):
    # Given a worker whose beats fail (the store out of reach), logged once
    # (its jobs' beat, which would also end the outage, ten minutes away)
    jobs.register_kind(KIND, "tests.fixtures.bodies:noop")
    fast = {"worker_beat_interval_s": 0.02, "worker_stale_s": 0.2}
    fast |= {"heartbeat_interval_s": 600.0, "heartbeat_stale_s": 1200.0}
    w = Worker([project], config=dataclasses.replace(sqlite_cfg, **fast), kinds_=[KIND])
    try:
        (rt,) = w.runtimes
        tries = []

        def unreachable(runner_id, *, now):
            tries.append(now)
            raise JobStoreUnreachable("job store: the database is unreachable")

        monkeypatch.setattr(rt.store, "beat_runner", unreachable)

        def logged() -> int:
            return sum(r.getMessage() == "heartbeat failed" for r in caplog.records)

        with caplog.at_level(logging.ERROR, logger="nw.jobs.execution.runtime"):
            wait_until(lambda: len(tries) >= 3, what="three failed beats")
            assert logged() == 1  # once per outage, not once a beat
            # When a claim carries a beat that the store answers
            rt.rode(RunnersRead([], time.monotonic(), time.monotonic(), 0.0))
            # Then the outage is over: the next failure is news, and logged
            wait_until(lambda: logged() == 2, what="the failure after the ride logged")
    finally:
        _close(w)
