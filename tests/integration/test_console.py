"""The operator's calls with real worker processes, on both stores: a failed job's
attempts name its worker, a retry runs it again, workers are listed live, a
prune keeps the spend; and an embedded store file of an older schema upgrades."""

from __future__ import annotations

import socket
import sqlite3

import pytest

from nw import jobs
from nw.jobs.stores.sqlite import SCHEMA_VERSION, SqliteJobStore
from tests.fixtures import bodies
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _kinds():
    bodies.register_all()


def _ended(project, job_id, cfg, status):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.status == status and j,
        timeout=30,
        what=f"job {job_id[:8]} {status}",
    )


def test_a_failed_job_names_its_worker_and_a_retry_runs_it_again(project, cfg, tmp_path):
    marker = str(tmp_path / "marker")
    job = jobs.enqueue(project, "t.once", {"marker": marker}, actor="ann", config=cfg)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        failed = _ended(project, job.job_id, cfg, "failed")
        (attempt,) = failed.attempts
        assert attempt["ended"] == "failed" and "not loaded yet" in attempt["error"]
        assert attempt["host"] == socket.gethostname() and attempt["pid"] == worker.pid
        (seen,) = wait_until(lambda: jobs.workers(project, config=cfg), what="the worker listed")
        assert seen["pid"] == worker.pid and seen["state"] == "live" and seen["slots"] == 3
        assert "t.once" in seen["kinds"]
        # When it is retried, the same id runs again and succeeds
        again = jobs.retry_job(project, job.job_id, config=cfg)
        assert again.job_id == job.job_id and again.status == "queued"
        done = _ended(project, job.job_id, cfg, "succeeded")
        assert [a["ended"] for a in done.attempts] == ["succeeded"]
        assert done.artifact_ref == "art-1" and done.actor == {"id": "ann"}
    finally:
        stop(worker)
    # And a prune of everything finished keeps what it spent
    spent = jobs.spend(project, config=cfg)
    week = jobs.totals(project, config=cfg)["spend"]["week"]
    assert jobs.prune(project, older_than_s=0, config=cfg) == 1
    assert jobs.get_job(project, job.job_id, config=cfg) is None
    assert jobs.spend(project, config=cfg) == spent
    assert jobs.totals(project, config=cfg)["spend"]["week"] == week
    assert week["by_actor"] == {"ann": pytest.approx(0.2)}


def test_bulk_retry_is_gated_whole_under_a_budget(project, cfg, tmp_path):
    import dataclasses

    from nw.jobs import BudgetExceeded

    ids = []
    for i in range(3):
        job = jobs.enqueue(
            project,
            "t.once",
            {"marker": str(tmp_path / f"m{i}"), "estimated_usd": 0.3},
            config=cfg,
        )
        ids.append(job.job_id)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        for job_id in ids:
            _ended(project, job_id, cfg, "failed")
        capped = dataclasses.replace(cfg, budget_usd=0.75)  # two fit, three do not
        with pytest.raises(BudgetExceeded):
            jobs.retry_jobs(project, kind="t.once", config=capped)
        assert {jobs.get_job(project, i, config=cfg).status for i in ids} == {"failed"}
        retried = jobs.retry_jobs(project, kind="t.once", config=cfg)
        assert sorted(j.job_id for j in retried) == sorted(ids)
        for job_id in ids:
            _ended(project, job_id, cfg, "succeeded")
    finally:
        stop(worker)


def test_an_embedded_store_of_an_older_schema_is_upgraded_and_read(tmp_path):
    # Given a store file as schema version 1 left it (no rollup, no new indexes)
    path = tmp_path / "jobs.sqlite3"
    SqliteJobStore(path).close()
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE spend_rollup; DROP INDEX jobs_by_kind; DROP INDEX jobs_by_finished;"
        "PRAGMA user_version = 1;"
    )
    conn.close()
    # Then a read-only handle reads it as it is (nothing written)
    reader = SqliteJobStore(path, read_only=True)
    assert reader.spend()["actual_usd"] == 0.0 and reader.counts() == []
    reader.close()
    # And a writable one upgrades it to this version
    store = SqliteJobStore(path)
    assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.prune(cutoff=1e12) == 0 and store.spend()["actual_usd"] == 0.0
    store.close()


def test_an_idle_worker_reads_live_and_a_killed_one_lost(project, cfg):
    job = jobs.enqueue(project, "t.noop", {"i": 1}, config=cfg)  # the project has a store
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        wait_until(  # idle: its one job done (else the kill may land while it runs it)
            lambda: jobs.get_job(project, job.job_id, config=cfg).status == jobs.SUCCEEDED,
            what="the worker's one job done",
        )
        (seen,) = wait_until(
            lambda: [w for w in jobs.workers(project, config=cfg) if w["state"] == "live"],
            what="the worker live",
        )
        assert seen["pid"] == worker.pid and seen["busy"] == 0
    finally:
        worker.kill()  # no goodbye: its runner row stays behind
        worker.wait()
    (lost,) = wait_until(
        lambda: [w for w in jobs.workers(project, config=cfg) if w["state"] == "lost"],
        what="the killed worker read as lost",
    )
    assert lost["pid"] == worker.pid and lost["jobs"] == []


def test_a_killed_worker_stays_listed_lost_after_a_reaper_judged_it(project, cfg):
    from dataclasses import replace

    from nw.jobs.core import liveness
    from nw.jobs.execution.reaper import Reaper
    from nw.jobs.stores import shared_store

    job = jobs.enqueue(project, "t.noop", {"i": 1}, config=cfg)
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        _ended(project, job.job_id, cfg, "succeeded")
    finally:
        worker.kill()  # no goodbye: its runner row stays behind
        worker.wait()
    # Given a reaper (as `serve` or another worker runs one) ticking after the kill
    store = shared_store(project, cfg, create=True)
    # (its full passes rare, so its ticks judge the dead as a worker's do after a beat)
    reaper = Reaper(
        store, replace(cfg, heartbeat_interval_s=600.0, heartbeat_stale_s=1200.0), lambda _id: False
    )

    def judged_and_listed():
        reaper.tick()  # the tick that finds it dead comes before the read
        return [w for w in jobs.workers(project, config=cfg) if w["state"] == "lost"]

    # Then the killed worker is listed lost, not forgotten, once the reaper judged it
    (lost,) = wait_until(judged_and_listed, what="the killed worker listed lost after a reap")
    assert lost["pid"] == worker.pid
    assert judged_and_listed() == [lost]  # and it stays listed on the next passes
    # ... until an hour after its last beat, when the reaper removes its row
    later = replace(cfg, clock=lambda: cfg.clock() + liveness.LOST_KEPT_S + 1)
    Reaper(store, later, lambda _id: False).tick(full=True)
    assert jobs.workers(project, config=later) == []


def test_a_queued_job_no_live_worker_serves_says_so(project, cfg):
    # Given a job of a kind no worker claims, and one of a kind a live worker claims
    jobs.register_kind("t.unserved", "tests.fixtures.bodies:noop")
    orphan = jobs.enqueue(project, "t.unserved", {"i": 1}, config=cfg)
    # Then, with no worker at all, it says what holds it
    assert jobs.get_job(project, orphan.job_id, config=cfg).waiting == "no worker serves t.unserved"
    worker = start_worker(project, database_url=cfg.database_url)
    try:
        served = jobs.enqueue(project, "t.noop", {"i": 2}, config=cfg)
        _ended(project, served.job_id, cfg, "succeeded")  # a live worker of other kinds
        # And with a live worker that does not claim its kind, still
        shown = jobs.get_job(project, orphan.job_id, config=cfg)
        assert shown.status == jobs.QUEUED and shown.waiting == "no worker serves t.unserved"
    finally:
        stop(worker)


def test_a_bulk_retry_reads_the_learned_durations_once(project, cfg, monkeypatch):
    from nw.jobs.stores import shared_store

    params = [{"i": i, "model": "m", "operation": f"op{i % 2}"} for i in range(4)]
    ids = [jobs.enqueue(project, "t.noop", p, config=cfg).job_id for p in params]
    for job_id in ids:  # a queued job's cancel ends it at once: each is retryable
        jobs.cancel_job(project, job_id, config=cfg)
        _ended(project, job_id, cfg, "cancelled")
    store = shared_store(project, cfg, create=True)
    reads = []
    samples = type(store).samples

    def counted(self, keys, **kw):
        reads.append(list(keys))
        return samples(self, keys, **kw)

    monkeypatch.setattr(type(store), "samples", counted)
    retried = jobs.retry_jobs(project, status="cancelled", kind="t.noop", config=cfg)
    assert sorted(j.job_id for j in retried) == sorted(ids)
    assert {j.status for j in retried} == {"queued"}
    # one query for all four new runs' predictions (both keys, with their progress keys)
    assert len(reads) == 1 and {key.split("@")[0] for key in reads[0]} == {"m|op0", "m|op1"}
