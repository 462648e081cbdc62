"""``jobs.wait`` and ``jobs.watch`` (and their ``aio`` twins), on both stores.

"Woken, not polled" is proven by taking polling away: the waiters' periodic
re-read is pushed to ten minutes (``RECHECK_S``, ``WATCH_PROGRESS_S``), so a
waiter that returns within the test's deadline was woken by the store's
signal. How soon it wakes is a figure for ``misc/bench/wait_bench.py``, not
an assertion here.
"""

from __future__ import annotations

import asyncio
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from nw import jobs
from nw.errors import InvalidType, InvalidValue
from nw.jobs import aio
from nw.jobs.api import waiting
from nw.jobs.core.model import JobsConfig
from nw.jobs.execution.runtimes import shutdown_runtimes
from nw.jobs.stores import close_shared_stores
from tests.conftest import purge_postgres_project, require_postgres
from tests.fixtures import bodies
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop

pytestmark = pytest.mark.slow


@pytest.fixture
def no_polling(monkeypatch):
    monkeypatch.setattr(waiting, "RECHECK_S", 600.0)
    monkeypatch.setattr(waiting, "WATCH_PROGRESS_S", 600.0)


@pytest.fixture
def postgres_cfg(project):
    fast = {"heartbeat_interval_s": 0.2, "heartbeat_stale_s": 1.0, "stale_running_s": 2.0}
    yield JobsConfig(**fast, database_url=require_postgres())
    shutdown_runtimes(wait=False)
    close_shared_stores()
    purge_postgres_project(project)


@pytest.fixture(autouse=True)
def _kinds():
    bodies.register_all()


def in_thread(fn, *args, **kwargs):
    """``fn`` on a thread of its own. A waiter's own ``timeout`` is twice what the
    test waits for its result: with no polling, only a signal returns it in time."""
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(fn, *args, **kwargs)
    pool.shutdown(wait=False)
    return future


def test_wait_is_woken_by_a_worker_process_finishing_the_job(project, cfg, no_polling):
    # Given a queued job and a waiter that never re-reads on its own
    job = jobs.enqueue(project, "t.noop", {"i": 1}, config=cfg)
    waiter = in_thread(jobs.wait, project, job.job_id, timeout=120, config=cfg)
    assert not waiter.done()
    # When a worker process runs it
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        # Then the waiter returns the ended job
        done = waiter.result(timeout=60)
    finally:
        stop(worker)
    assert done.job_id == job.job_id and done.status == jobs.SUCCEEDED


def test_wait_is_woken_by_a_cancel_of_a_queued_job(project, cfg, no_polling):
    job = jobs.enqueue(project, "t.noop", {"i": 2}, config=cfg)  # no worker: it stays queued
    waiter = in_thread(jobs.wait, project, job.job_id, timeout=120, config=cfg)
    # (the cancel may land before or after the waiter subscribes: either way it ends)
    jobs.cancel_job(project, job.job_id, config=cfg)
    assert waiter.result(timeout=60).status == jobs.CANCELLED


def test_wait_times_out_and_refuses_what_it_cannot_wait_for(project, cfg):
    job = jobs.enqueue(project, "t.noop", {"i": 3}, config=cfg)  # no worker: it never ends
    with pytest.raises(TimeoutError, match=r"had not ended after 0\.2 s"):
        jobs.wait(project, job.job_id, timeout=0.2, config=cfg)
    with pytest.raises(InvalidValue, match="no job"):
        jobs.wait(project, "f" * 64, timeout=1, config=cfg)
    with pytest.raises(InvalidValue):
        jobs.wait(project, job.job_id, timeout=-1, config=cfg)
    with pytest.raises(InvalidType):
        jobs.wait(project, job.job_id, timeout="soon", config=cfg)


def test_watch_yields_each_change_until_the_job_ends(project, cfg, gate):
    # Given a running job held at its one stage
    job = jobs.enqueue(project, "gated", {"i": 4}, dispatch={"gated": gate}, config=cfg)
    assert gate.started.wait(30)
    seen = []
    for state in jobs.watch(project, job.job_id, timeout=60, config=cfg):
        seen.append(state)
        if state.status == jobs.RUNNING:
            gate.release.set()  # When the body is let go
    # Then the last state seen is the end, and running came before it
    assert seen[-1].status == jobs.SUCCEEDED and seen[-1].is_terminal
    assert [s.status for s in seen].count(jobs.SUCCEEDED) == 1
    assert seen[0].status == jobs.RUNNING


def test_a_lost_listen_connection_is_opened_again_and_the_waiter_still_wakes(
    project, postgres_cfg, no_polling
):
    cfg = postgres_cfg
    job = jobs.enqueue(project, "t.noop", {"i": 5}, config=cfg)
    waiter = in_thread(jobs.wait, project, job.job_id, timeout=180, config=cfg)
    # When the database ends the listener's session (a restart, a proxy's timeout)
    terminated = wait_until(lambda: _terminate("nw-jobs changes", cfg), what="the listener")
    assert terminated >= 1
    # and then a worker runs the job
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        assert waiter.result(timeout=90).status == jobs.SUCCEEDED
    finally:
        stop(worker)


def _terminate(application: str, cfg) -> int:
    sql = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        f"WHERE application_name = '{application}' AND datname = current_database()"
    )
    out = subprocess.run(
        ["psql", "-qtA", cfg.database_url, "-c", sql], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip() or 0)


def test_the_aio_twins_answer_as_the_sync_calls_and_wait_without_a_thread(
    project, cfg, gate, no_polling
):
    async def scenario():
        estimate = await aio.estimate(project, "gated", {"estimated_usd": 0.2}, config=cfg)
        assert estimate == jobs.estimate(project, "gated", {"estimated_usd": 0.2}, config=cfg)
        job = await aio.enqueue(project, "gated", {"i": 6}, dispatch={"gated": gate}, config=cfg)
        (same,) = await aio.enqueue_many(project, [("t.noop", {"i": 7})], config=cfg)
        got = await aio.get_job(project, job.job_id, config=cfg)
        assert got.job_id == job.job_id
        listed = await aio.list_jobs(project, config=cfg)
        assert {j.job_id for j in listed} == {job.job_id, same.job_id}
        # a wait parks on the loop: other coroutines run meanwhile
        waiting_for = asyncio.create_task(aio.wait(project, job.job_id, timeout=60, config=cfg))
        await asyncio.sleep(0)
        assert not waiting_for.done()
        states = []
        async for state in aio.watch(project, job.job_id, timeout=60, config=cfg):
            states.append(state.status)
            if state.status == jobs.RUNNING:
                gate.release.set()
        done = await waiting_for
        assert done.status == jobs.SUCCEEDED and states[-1] == jobs.SUCCEEDED
        cancelled = await aio.cancel_job(project, same.job_id, config=cfg)
        assert cancelled.status == jobs.CANCELLED
        never = await aio.enqueue(project, "t.noop", {"i": 8}, config=cfg)  # no worker
        with pytest.raises(TimeoutError):
            await aio.wait(project, never.job_id, timeout=0.2, config=cfg)

    asyncio.run(scenario())


def test_a_waiter_on_the_loop_holds_no_thread(project, sqlite_cfg, no_polling):
    cfg = sqlite_cfg
    job = jobs.enqueue(project, "t.noop", {"i": 9}, config=cfg)

    async def many():
        # Given more waiters than aio has threads (it has aio.THREADS)
        tasks = [
            asyncio.create_task(aio.wait(project, job.job_id, config=cfg))
            for _ in range(aio.THREADS * 4)
        ]
        await asyncio.sleep(0.5)
        # Then another aio call still gets a thread: no waiter holds one
        seen = await asyncio.wait_for(aio.get_job(project, job.job_id, config=cfg), 30)
        assert seen.status == jobs.QUEUED and not any(t.done() for t in tasks)
        jobs.cancel_job(project, job.job_id, config=cfg)
        return await asyncio.wait_for(asyncio.gather(*tasks), 60)

    ended = asyncio.run(many())
    assert {j.status for j in ended} == {jobs.CANCELLED}
