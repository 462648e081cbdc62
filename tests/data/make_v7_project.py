"""Write ``tests/data/v7_project/`` (a project folder whose job store is an
embedded SQLite file of schema version 7, two tables per job: ``jobs`` and
``status``) and ``tests/data/v7_project.json`` (what that code reads back).

Run with the code of main at c544a02 (schema 7), from the repository root:

    git worktree add --detach /tmp/nw-v7 c544a02 && cd /tmp/nw-v7 && PYTHONPATH=. \
        python <this checkout>/tests/data/make_v7_project.py <this checkout>/tests/data

It leaves a job in every state: succeeded with a result (NUL byte and
non-ASCII text in it), failed, cancelled, queued, queued with a delay
(``not_before``), queued with a retry's backoff (claimed, requeued), running
(claimed by a runner whose process is gone), parked at a provider, a pipeline
of three steps (one succeeded by hand, two waiting), plus a spend with a cost,
learned durations, a limit and a budget. ``tests/test_sqlite_upgrade.py``
opens a copy with today's code and compares against the snapshot.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import nw
from nw import jobs
from nw.jobs import JobsConfig, register_kind
from nw.jobs.stores import close_shared_stores, open_store

FAR = 4102444800.0  # 2100-01-01: a delay or backoff that never comes due


def succeed(project, params):
    return {"text": "a\x00b é ✓ 日本", "n": 3, "cost_usd_actual": 0.75}


def fail(project, params):
    raise RuntimeError("provider said no: ✗")


def snapshot(project, cfg) -> dict:
    listed = jobs.list_jobs(project, limit=100, config=cfg)
    by_id = {}
    for job in listed:
        got = jobs.get_job(project, job.job_id, config=cfg)
        assert got is not None
        by_id[job.job_id] = jobs.to_dict(got)
    store = open_store(project, cfg, create=False)
    assert store is not None
    keys = sorted({r["key"] for r in _rows(project, "SELECT DISTINCT key FROM durations")})
    out = {
        "jobs": by_id,
        "order": [j.job_id for j in listed],
        "spend": jobs.spend(project, config=cfg),
        "store_spend": store.spend(),
        "durations": store.samples(keys, window=100),
        "limits": jobs.list_limits(project, config=cfg),
        "budgets": jobs.list_budgets(project, config=cfg),
        "counts": sorted(store.counts(), key=lambda r: (r["state"], r["grade"] or "")),
    }
    store.close()
    return out


def _rows(project, sql: str) -> list[dict]:
    path = Path(project.root) / ".nw" / "jobs" / "jobs.sqlite3"
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def main(out: Path) -> None:
    # where it was at c544a02 (the runtime registry moved to runtimes.py since)
    from nw.jobs.execution.runtime import shutdown_runtimes

    folder = out / "v7_project"
    if folder.exists():
        shutil.rmtree(folder)
    project = nw.Project.init(folder, title="v7 fixture")
    cfg = JobsConfig()
    register_kind("v7.render", "tests.data.make_v7_project:succeed")
    register_kind("v7.step", "tests.data.make_v7_project:succeed")

    ok = jobs.enqueue(project, "v7.ok", {"i": 1}, dispatch={"v7.ok": succeed}, config=cfg)
    jobs.wait(project, ok.job_id, timeout=30, config=cfg)
    bad = jobs.enqueue(project, "v7.bad", {"i": 2}, dispatch={"v7.bad": fail}, config=cfg)
    jobs.wait(project, bad.job_id, timeout=30, config=cfg)
    # a worker's kinds with no worker: they stay queued
    queued = jobs.enqueue(project, "v7.render", {"i": 3}, priority=2, config=cfg)
    gone = jobs.enqueue(project, "v7.render", {"i": 4}, config=cfg)
    jobs.cancel_job(project, gone.job_id, config=cfg)
    jobs.enqueue(project, "v7.render", {"i": 5}, not_before=FAR, config=cfg)
    retried = jobs.enqueue(project, "v7.render", {"i": 6}, actor="ann", config=cfg)
    running = jobs.enqueue(project, "v7.render", {"i": 7}, limit_key="prov:x", config=cfg)
    parked = jobs.enqueue(project, "v7.render", {"i": 8}, config=cfg)
    pipe = jobs.enqueue_pipeline(
        project,
        {
            "a": {"kind": "v7.step", "params": {"s": "a"}, "after": []},
            "b": {"kind": "v7.step", "params": {"s": "b"}, "after": ["a"]},
            "c": {"kind": "v7.step", "params": {"s": "c"}, "after": ["b"]},
        },
        label="three steps",
        config=cfg,
    )
    jobs.set_limit(project, "prov:x", max_running=2, per_second=5, config=cfg)
    jobs.set_budget(project, 50.0, per="month", config=cfg)
    jobs.set_budget(project, 10.0, actor="ann", config=cfg)

    store = open_store(project, cfg, create=True)
    now = time.time()
    store.register_runner("r-gone", {"host": "gone-host", "pid": 999999}, now=now)
    # the retry: claimed, then requeued with a backoff far ahead
    claim = store.claim(["v7.render"], now=now, runner_id="r-gone", limit=10)
    by_id = {r.record["job_id"]: r for r in claim}
    assert {retried.job_id, running.job_id, parked.job_id} <= set(by_id), by_id.keys()
    for row in claim:
        if row.record["job_id"] not in (retried.job_id, running.job_id, parked.job_id):
            store.requeue(
                row.record["job_id"], fields={}, not_before=now, attempt=row.record["attempt"]
            )
    store.requeue(
        retried.job_id,
        fields={"error": "transient: 503", "earlier_runs_usd": 0.25},
        not_before=FAR,
        attempt=by_id[retried.job_id].record["attempt"],
    )
    store.park(
        parked.job_id,
        attempt=by_id[parked.job_id].record["attempt"],
        kind="v7.render",
        request_id="req-ü-1",
        due_at=FAR,
        deadline_at=None,
        fields={"provider": {"request_id": "req-ü-1"}},
        now=now,
    )
    # the pipeline's first step: claimed and succeeded (its dependent is released)
    first = next(s.job.job_id for s in pipe.steps if s.name == "a")
    (row,) = store.claim(["v7.step"], now=now, runner_id="r-gone")
    assert row.record["job_id"] == first
    from au import ComputationStatus

    store.finish(
        first,
        au_status=ComputationStatus.COMPLETED,
        result={"frames": ["ä", "\x00"]},
        error=None,
        fields={"finished_at": now, "actual_usd": 1.5},
        attempt=row.record["attempt"],
    )
    store.add_samples({"flux|t2i": 12.5, "image": 3.25}, now=now, window=50)
    store.add_samples({"flux|t2i": 14.0}, now=now + 1, window=50)
    store.unregister_runner("r-gone")  # the worker's process is gone
    del queued
    store.close()
    shutdown_runtimes(wait=True)
    close_shared_stores()

    snap = snapshot(project, cfg)
    shutdown_runtimes(wait=True)
    close_shared_stores()
    path = folder / ".nw" / "jobs" / "jobs.sqlite3"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("VACUUM")
    conn.close()
    (out / "v7_project.json").write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
