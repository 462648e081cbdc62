"""A project file of schema 7 (two tables per job, ``tests/data/v7_project``,
written by ``tests/data/make_v7_project.py`` with main at c544a02) opened by
this code: upgraded to one row per job, it reads back as that code read it
(``tests/data/v7_project.json``), and a failed upgrade leaves it as it was."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import nw
from nw.errors import JobStoreError
from nw.jobs import JobsConfig
from nw.jobs.stores import close_shared_stores, open_store, sqlite_base
from nw.jobs.stores.sqlite import SCHEMA_VERSION, SqliteJobStore
from tests.data.make_v7_project import snapshot

#: The columns version 8 moved from the ``status`` table into ``jobs``.
AU_COLUMNS = ("au_status", "au_value", "au_error", "au_reason", "au_completed_at", "queue_at")
DATA = Path(__file__).resolve().parents[1] / "data"
#: The fixture's running job has a runner long gone: a read now would reap
#: it (as version 7 would); its record is compared as it was written.
NO_REAP = JobsConfig(stale_running_s=1e10, heartbeat_stale_s=1e10)
#: The job fields derived from the clock at the time of reading, not stored.
CLOCK_FIELDS = ("eta_s", "eta_ts", "remaining_s", "worker_silent_s", "worker_responsive")
#: Of a job not finished, its times so far (from now).
CLOCK_LIVE_FIELDS = ("queue_wait_s", "elapsed_s", "predicted_total_s")
#: A delayed job reads "starts in <hours>h" (from now) in these fields.
CLOCK_WAITING = "starts in "
#: A limit's starts in the last second (before now).
CLOCK_LIMIT_FIELDS = ("started_last_s",)
#: A budget's calendar window is the one holding today.
CLOCK_BUDGET_FIELDS = ("window_start", "window_end")


def _copy(tmp_path: Path) -> nw.Project:
    folder = tmp_path / "proj"
    shutil.copytree(DATA / "v7_project", folder)
    return nw.Project(folder)


def _db(project: nw.Project) -> Path:
    return Path(project.root) / ".nw" / "jobs" / "jobs.sqlite3"


def _tables(path: Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: [r[1] for r in conn.execute(f"PRAGMA table_info({n})")] for n in names}
    finally:
        conn.close()


def _dump(path: Path) -> tuple[int, list[str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0], list(conn.iterdump())
    finally:
        conn.close()


def _unclocked(snap: dict) -> dict:
    for job in snap["jobs"].values():
        for name in CLOCK_FIELDS:
            job.pop(name, None)
        if job["finished_at"] is None:
            for name in CLOCK_LIVE_FIELDS:
                job.pop(name, None)
        for name in ("waiting", "label_hint"):
            if str(job.get(name) or "").startswith(CLOCK_WAITING):
                job[name] = CLOCK_WAITING
    for limit in snap["limits"]:
        for name in CLOCK_LIMIT_FIELDS:
            limit.pop(name)
    for budget in [*snap["budgets"], *snap["spend"]["budgets"]]:
        for name in CLOCK_BUDGET_FIELDS:
            budget.pop(name)
    return snap


def test_a_schema_7_project_reads_back_as_it_did_after_the_upgrade(tmp_path):
    # Given a copy of the schema-7 project (a job in every state, spend,
    # learned durations, a limit, budgets), as version 7 read it
    project = _copy(tmp_path)
    expected = json.loads((DATA / "v7_project.json").read_text())
    assert _tables(_db(project))["status"]  # the two-table shape
    # When this code opens it
    try:
        got = snapshot(project, NO_REAP)
    finally:
        close_shared_stores()
    # Then the file is at this version, one row per job
    tables = _tables(_db(project))
    assert "status" not in tables
    assert set(AU_COLUMNS) <= set(tables["jobs"])
    assert _dump(_db(project))[0] == SCHEMA_VERSION
    # And every job, the spend, the durations, the limits and the budgets read
    # as before (but for what is derived from the clock)
    assert got["order"] == expected["order"]
    want, have = _unclocked(expected), _unclocked(got)
    for job_id, job in want["jobs"].items():
        assert have["jobs"][job_id] == job, job_id
    assert have == want


def test_the_upgraded_file_works_on(tmp_path):
    # Given the upgraded copy
    project = _copy(tmp_path)
    expected = json.loads((DATA / "v7_project.json").read_text())
    store = SqliteJobStore(_db(project))
    try:
        # Then the queued job due now is claimed, and the delayed ones are not
        claimed = store.claim(["v7.render", "v7.step"], now=2e9, runner_id="r", limit=10)
        kinds = {expected["jobs"][r.record["job_id"]]["kind"] for r in claimed}
        states = {expected["jobs"][r.record["job_id"]]["status"] for r in claimed}
        assert claimed and kinds <= {"v7.render", "v7.step"} and states == {"queued"}
        assert all(expected["jobs"][r.record["job_id"]]["not_before"] is None for r in claimed)
        # And the au status entry of a succeeded job is its row's
        ok = next(k for k, j in expected["jobs"].items() if j["kind"] == "v7.ok")
        entry = store.get_status(ok)
        assert entry is not None and entry.value == expected["jobs"][ok]["result"]
    finally:
        store.close()


def test_a_failed_upgrade_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    # Given the schema-7 copy, and an upgrade that fails after the status
    # table's rows were copied and before it is dropped
    project = _copy(tmp_path)
    before = _dump(_db(project))
    failing = dict(sqlite_base.UPGRADES, upgrade_8_drop_status="SELECT no_such_function()")
    monkeypatch.setattr(sqlite_base, "UPGRADES", failing)
    # When this code opens it, the open fails
    with pytest.raises(JobStoreError, match="cannot be opened"):
        SqliteJobStore(_db(project))
    # Then nothing of it was written: version 7, both tables, every row as it was
    assert _dump(_db(project)) == before
    # And the real upgrade, run after it, succeeds (and again: it is idempotent)
    monkeypatch.undo()
    for _ in range(2):
        SqliteJobStore(_db(project)).close()
        assert _dump(_db(project))[0] == SCHEMA_VERSION
        conn = sqlite3.connect(_db(project))
        conn.row_factory = sqlite3.Row
        sqlite_base.upgrade(conn)  # nothing left to do: no error, no change
        conn.close()


def test_a_read_only_handle_reads_a_schema_7_file_without_upgrading_it(tmp_path):
    project = _copy(tmp_path)
    before = _dump(_db(project))
    expected = json.loads((DATA / "v7_project.json").read_text())
    conn = sqlite3.connect(_db(project))
    claimable = conn.execute(
        "SELECT count(*) FROM status WHERE queue_at IS NOT NULL AND status = 'pending'"
    ).fetchone()[0]
    conn.close()
    reader = open_store(project, JobsConfig(), create=False)
    assert reader is not None and reader.read_only
    try:
        rows = {r.record["job_id"]: r for r in reader.page(limit=100)}
        assert {k: j["status"] for k, j in expected["jobs"].items()} == {
            k: r.status.value for k, r in rows.items()
        }
        assert reader.spend() == expected["store_spend"]
        assert claimable and len(reader.queue_ahead(limit=50)) == claimable
    finally:
        reader.close()
    assert _dump(_db(project)) == before


def test_a_read_only_handle_reads_on_after_another_process_upgrades_the_file(tmp_path):
    # A dashboard reading someone else's project holds a read-only handle on
    # the old file; the project's owner then opens it with this release.
    project = _copy(tmp_path)
    expected = json.loads((DATA / "v7_project.json").read_text())
    some = next(iter(expected["jobs"]))
    reader = SqliteJobStore(_db(project), read_only=True)
    try:
        assert reader.get(some) is not None
        SqliteJobStore(_db(project)).close()  # the upgrade to version 8
        assert "status" not in _tables(_db(project))
        row = reader.get(some)
        assert row is not None and row.status.value == expected["jobs"][some]["status"]
        assert len(reader.page(limit=100)) == len(expected["jobs"])
    finally:
        reader.close()


def test_a_job_whose_status_entry_was_missing_still_reads_failed(tmp_path):
    # Given the schema-7 copy with one queued job's status entry gone (version
    # 7 read such a job as failed, "the job's status entry is missing")
    project = _copy(tmp_path)
    expected = json.loads((DATA / "v7_project.json").read_text())
    lost = next(k for k, j in expected["jobs"].items() if j["status"] == "queued")
    conn = sqlite3.connect(_db(project))
    conn.execute("DELETE FROM status WHERE job_id = ?", (lost,))
    conn.commit()
    conn.close()
    # When this code opens it, the job reads so still, and is never claimed
    store = SqliteJobStore(_db(project))
    try:
        row = store.get(lost)
        assert row is not None and row.status.value == "failed"
        assert row.error == "the job's status entry is missing"
        claimed = store.claim(["v7.render", "v7.step"], now=2e9, runner_id="r", limit=20)
        assert lost not in {r.record["job_id"] for r in claimed}
        # And the other jobs are as they were
        assert store.get(next(k for k in expected["jobs"] if k != lost)) is not None
    finally:
        store.close()
