"""Bad input gets a clear error that names the problem, and nothing is written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import nw
from nw import jobs
from nw.jobs.stores import shared_store

OK = {"r": lambda p, q: {"ok": 1}}


def db_path(project) -> Path:
    return Path(project.root) / ".nw/jobs/jobs.sqlite3"


def count_jobs(project) -> int:
    if not db_path(project).exists():
        return 0
    with sqlite3.connect(db_path(project)) as conn:
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"when": object()}, "when"),
        ({"nested": {"deep": {1, 2}}}, "nested.deep"),
        ({"ratio": float("nan")}, "ratio"),
        ({"list": [1, b"x"]}, "list[1]"),
    ],
)
def test_params_that_are_not_json_raise_typeerror_naming_the_key(project, params, named):
    with pytest.raises(TypeError, match=named.replace("[", r"\[").replace("]", r"\]")):
        jobs.enqueue(project, "r", params, dispatch=OK)
    assert count_jobs(project) == 0


def test_an_unknown_kind_is_a_keyerror_and_writes_nothing(project):
    with pytest.raises(KeyError, match="unknown kind 'nope'"):
        jobs.enqueue(project, "nope", {}, dispatch=OK)
    assert not db_path(project).exists()


@pytest.mark.parametrize("units", [0, -2, 1.5, "3", True])
def test_malformed_units_are_a_valueerror_in_enqueue_and_estimate(project, units):
    with pytest.raises(ValueError, match="units"):
        jobs.enqueue(project, "r", {"units": units}, dispatch=OK)
    with pytest.raises(ValueError, match="units"):
        jobs.estimate(project, "r", {"units": units})
    assert count_jobs(project) == 0


@pytest.mark.parametrize(
    "bad", ["../../etc/passwd", "a/b", "x" * 10_000, "ab\0cd", "", "A" * 64, "no-such-job"]
)
def test_a_string_that_cannot_name_a_job_is_unknown_before_any_store_sees_it(
    project, bad, monkeypatch
):
    from nw.jobs.api import facade, reads

    def no_store(*_args, **_kwargs):
        raise AssertionError(f"the store was opened for {bad!r}")

    for module in (facade, reads):  # where get_job, cancel_job and the progress read open it
        monkeypatch.setattr(module, "reader", no_store)
    assert jobs.get_job(project, bad) is None
    assert jobs.cancel_job(project, bad) is None
    assert jobs.get_job_progress(project, bad) == []


@pytest.mark.parametrize("bad", [42, None, b"a" * 64])
def test_a_job_id_that_is_not_a_string_is_a_typeerror(project, bad):
    for call in (jobs.get_job, jobs.cancel_job, jobs.get_job_progress):
        with pytest.raises(TypeError, match="job_id must be a string"):
            call(project, bad)


def test_a_missing_project_folder_is_a_clear_error(tmp_path):
    with pytest.raises(nw.ProjectError, match="does not exist"):
        jobs.list_jobs(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="unknown status"):
        jobs.list_jobs(tmp_path, status="done")


def test_a_corrupt_record_reads_as_failed_and_the_rest_keeps_working(project, sqlite_cfg):
    cfg = sqlite_cfg  # tears a write in the SQLite file itself
    good = jobs.enqueue(project, "r", {"i": 1}, dispatch=OK, config=cfg)
    bad = jobs.enqueue(project, "r", {"i": 2}, dispatch=OK, config=cfg)
    from tests.helpers import wait_until

    wait_until(lambda: all(j.is_terminal for j in jobs.list_jobs(project, config=cfg)))
    with sqlite3.connect(db_path(project)) as conn:  # a torn write, as a disk might leave it
        conn.execute('UPDATE jobs SET doc = \'{"kind": "r", "par\' WHERE job_id = ?', (bad.job_id,))
    broken = jobs.get_job(project, bad.job_id, config=cfg)
    assert broken.status == jobs.FAILED
    assert "unreadable" in broken.error
    listed = {j.job_id: j.status for j in jobs.list_jobs(project, config=cfg)}
    assert listed == {good.job_id: jobs.SUCCEEDED, bad.job_id: jobs.FAILED}
    assert {j.job_id for j in jobs.summarize(project.root, config=cfg)} == set(listed)


def test_a_corrupt_store_file_is_a_clear_error_naming_it(project, sqlite_cfg):
    cfg = sqlite_cfg  # overwrites the SQLite file itself
    jobs.enqueue(project, "r", {}, dispatch=OK, config=cfg)
    from nw.jobs.execution.runtimes import shutdown_runtimes
    from nw.jobs.stores import close_shared_stores

    shutdown_runtimes(wait=True)
    close_shared_stores()
    for suffix in ("-wal", "-shm"):
        Path(str(db_path(project)) + suffix).unlink(missing_ok=True)
    db_path(project).write_bytes(b"this is not a database" * 100)
    for call in (lambda: jobs.list_jobs(project), lambda: jobs.summarize(project)):
        with pytest.raises(jobs.JobStoreError, match=r"jobs\.sqlite3"):
            call()


def test_secrets_never_reach_the_disk_and_are_redacted_from_errors(project, cfg):
    secret = "sk-live-0123456789"

    def body(project, params, *, secrets):
        raise RuntimeError(f"provider said no to key {secrets['fal']}")

    job = jobs.enqueue(
        project, "r", {"prompt": "cat"}, dispatch={"r": body}, secrets={"fal": secret}, config=cfg
    )
    from tests.helpers import wait_until

    done = wait_until(
        lambda: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j
    )
    assert secret not in done.error and "***" in done.error
    if cfg.database_url:  # PostgreSQL: no stored row of the project holds it
        from tests.conftest import postgres_rows

        assert secret not in postgres_rows(project)
        return
    store = shared_store(project, cfg, create=False)
    store.close()  # checkpoint the WAL so every byte is in the files we read
    on_disk = b"".join(p.read_bytes() for p in db_path(project).parent.iterdir() if p.is_file())
    assert secret.encode() not in on_disk
