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
    assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
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
