"""list_jobs and summarize: ordering, filters, and summarize touching nothing."""

from __future__ import annotations

from pathlib import Path

import nw
from nw import jobs
from nw.jobs import stores
from nw.jobs.execution import runtimes
from tests.helpers import wait_until


def test_list_jobs_is_newest_first_with_status_filter_and_limit(project, cfg, gate):
    done = [
        jobs.enqueue(project, "ok", {"i": i}, dispatch={"ok": lambda p, q: {"v": 1}}, config=cfg)
        for i in range(3)
    ]
    wait_until(lambda: all(jobs.get_job(project, j.job_id, config=cfg).is_terminal for j in done))
    live = jobs.enqueue(project, "wait", {}, dispatch={"wait": gate}, config=cfg)
    assert gate.started.wait(5)
    listed = jobs.list_jobs(project, config=cfg)
    assert [j.job_id for j in listed] == [live.job_id, *[j.job_id for j in reversed(done)]]
    assert [j.job_id for j in jobs.list_jobs(project, status="running", config=cfg)] == [
        live.job_id
    ]
    assert len(jobs.list_jobs(project, status=jobs.SUCCEEDED, config=cfg)) == 3
    assert len(jobs.list_jobs(project, limit=2, config=cfg)) == 2


def test_summarize_creates_nothing_for_a_folder_that_never_ran_a_job(tmp_path):
    folder = tmp_path / "untouched"
    folder.mkdir()
    assert jobs.summarize(folder) == []
    assert jobs.list_jobs(folder) == []
    assert list(folder.iterdir()) == []
    assert runtimes._RUNTIMES == {} and stores._SHARED == {}


def test_summarize_reads_without_writing_or_holding_anything(project, cfg):
    job = jobs.enqueue(project, "r", {}, dispatch={"r": lambda p, q: {"ok": 1}}, config=cfg)
    wait_until(lambda: jobs.get_job(project, job.job_id, config=cfg).is_terminal)
    runtimes.shutdown_runtimes()
    stores.close_shared_stores()
    db = Path(project.root) / ".nw/jobs/jobs.sqlite3"

    def stored():
        if cfg.database_url:
            from tests.conftest import postgres_rows

            return postgres_rows(project)
        import sqlite3

        with sqlite3.connect(db) as conn:  # every row of every table, WAL included
            return list(conn.iterdump())

    before = stored()
    other = nw.Project.init(project.root.parent / "second")
    summary = jobs.summarize(str(project.root), config=cfg)
    assert [j.job_id for j in summary] == [job.job_id]
    assert jobs.summarize(other.root, config=cfg) == []
    assert stored() == before
    assert runtimes._RUNTIMES == {} and stores._SHARED == {}


def test_actor_is_recorded_and_filters_views(project, cfg):
    ok = {"r": lambda p, q: {"ok": 1}}
    mine = jobs.enqueue(
        project, "r", {"i": 1}, actor={"id": "u1", "handle": "@ann"}, dispatch=ok, config=cfg
    )
    jobs.enqueue(project, "r", {"i": 2}, actor="u2", dispatch=ok, config=cfg)
    assert mine.actor == {"id": "u1", "handle": "@ann"}
    assert [j.job_id for j in jobs.list_jobs(project, actor="u1", config=cfg)] == [mine.job_id]
    assert [j.job_id for j in jobs.summarize(project, actor="u1", config=cfg)] == [mine.job_id]
    snap = jobs.snapshot([project], actor="u1", config=cfg)
    assert [j["job_id"] for j in snap["active"] + snap["recent"]] == [mine.job_id]


def test_snapshot_counts_every_live_job_however_deep_the_history(project, cfg):
    jobs.register_kind("t.later", "tests.fixtures.bodies:noop")
    waiting = jobs.enqueue(project, "t.later", {"i": 0}, config=cfg)  # no worker: stays queued
    ok = {"r": lambda p, q: {"ok": 1}}
    for i in range(100):
        jobs.enqueue(project, "r", {"i": i}, dispatch=ok, config=cfg)
    wait_until(
        lambda: len(jobs.list_jobs(project, status="succeeded", limit=200, config=cfg)) == 100
    )
    snap = jobs.snapshot([project], active_limit=5, recent_limit=3, config=cfg)
    assert snap["active_count"] == 1
    assert [j["job_id"] for j in snap["active"]] == [waiting.job_id]
    assert len(snap["recent"]) == 3
