"""A paid result is never lost or paid for twice, with real worker processes.

* Text no store keeps as given (NUL, a lone surrogate) in a result, an error
  or an event: one rule on both stores (U+FFFD, recorded in ``text_replaced``);
  the job ends as its body ended, its cost recorded once, its body run once.
* A finish the store refuses for a while (SQLite's "database or disk is
  full", injected into a worker process): kept, written again, the job never
  reaped nor re-run; and a worker killed while the finish is pending leaves it
  in the journal, which the next worker replays before it claims.
* One malformed row hurts only itself in spend, budgets, totals, metrics, lists.
* The job's secrets are scrubbed from a stored result; a secrets provider's
  failure is logged without its text.

Runs counted in a file by the bodies (``tests/fixtures/paid_results.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from nw import jobs
from nw.jobs.api import console
from nw.jobs.core.storable import REPLACED_FIELD, REPLACEMENT
from nw.jobs.execution.journal import DIRNAME, FINISHING_HINT, journal_dir
from tests.fixtures import paid_results
from tests.helpers import wait_until
from tests.integration.workers import ROOT, start_worker, stop, stored_record

pytestmark = pytest.mark.slow

IMPORT = ("--import", "tests.fixtures.paid_results")


@pytest.fixture(autouse=True)
def _kinds():
    paid_results.register_all()


def _ended(project, job_id, cfg, timeout=60):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.is_terminal and j,
        timeout=timeout,
        what=f"job {job_id[:8]} to end",
    )


def _runs(log) -> int:
    return log.read_text().count("ran\n") if log.exists() else 0


# ----- NUL and lone surrogates: one rule on both stores ---------------------------------
@pytest.mark.parametrize("text", ["nul", "surrogate"])
def test_a_result_no_store_keeps_as_given_succeeds_with_its_cost_once(cfg, project, tmp_path, text):
    log = tmp_path / "runs.log"
    job = jobs.enqueue(project, "pr.returns", {"log": str(log), "text": text}, config=cfg)
    worker = start_worker(project, database_url=cfg.database_url, extra=IMPORT)
    try:
        done = _ended(project, job.job_id, cfg)
    finally:
        stop(worker)
    assert done.status == jobs.SUCCEEDED, done.error
    assert done.cost.actual_usd == 1.25 and done.attempt == 1
    msg = paid_results.TEXTS[text]
    kept = msg.replace("\x00", REPLACEMENT).replace("\ud800", REPLACEMENT)
    assert done.result == {"provider_msg": kept, kept: "as a key", "cost_usd_actual": 1.25}
    assert stored_record(project, cfg, job.job_id)[REPLACED_FIELD] == ["result"]
    assert done.text_replaced == ["result"]
    assert jobs.spend(project, config=cfg)["actual_usd"] == 1.25
    assert _runs(log) == 1


@pytest.mark.parametrize("text", ["nul", "surrogate"])
def test_an_error_no_store_keeps_as_given_fails_with_its_cost_once(cfg, project, tmp_path, text):
    log = tmp_path / "runs.log"
    job = jobs.enqueue(project, "pr.raises", {"log": str(log), "text": text}, config=cfg)
    worker = start_worker(project, database_url=cfg.database_url, extra=IMPORT)
    try:
        done = _ended(project, job.job_id, cfg)
        trail = jobs.get_job_progress(project, job.job_id, config=cfg)
    finally:
        stop(worker)
    assert done.status == jobs.FAILED and done.error_kind == "crashed"
    said = paid_results.TEXTS[text].replace("\x00", REPLACEMENT).replace("\ud800", REPLACEMENT)
    assert done.error == f"RuntimeError: provider said: {said}"
    assert done.attempts[-1]["error"] == done.error
    assert done.cost.actual_usd == 0.5
    # the event's message, in the trail, by the same rule
    assert said in [beat.get("message") for beat in trail], trail
    assert set(stored_record(project, cfg, job.job_id)[REPLACED_FIELD]) >= {"error"}
    assert "error" in done.text_replaced
    assert jobs.spend(project, config=cfg)["actual_usd"] == 0.5
    assert _runs(log) == 1


# ----- a finish the store refuses for a while (SQLite: disk full) -----------------------
FAULTY_WORKER = """
    import os, sqlite3, sys
    from nw.jobs.stores.sqlite import SqliteJobStore

    full, log = os.environ["NW_TEST_DISK_FULL"], os.environ["NW_TEST_FAULT_LOG"]
    real = SqliteJobStore.finish

    def finish(self, job_id, **kw):
        if os.path.exists(full):  # the disk is full while this file is there
            with open(log, "a") as f:
                f.write(job_id + "\\n")
            with self._driver_errors():  # as SQLite says it: the store's own error
                raise sqlite3.OperationalError("database or disk is full")
        return real(self, job_id, **kw)

    SqliteJobStore.finish = finish
    from nw.jobs.execution.worker import main
    sys.exit(main(sys.argv[1:]))
"""


def _faulty_worker(project, tmp_path, log_path):
    """A worker whose store refuses every finish while ``full`` exists, as
    SQLite does on a full disk; ``faults`` gets a line per refusal."""
    faults, full = tmp_path / "faults.log", tmp_path / "disk-is-full"
    faults.touch()
    full.touch()
    args = [
        sys.executable,
        "-c",
        textwrap.dedent(FAULTY_WORKER),
        "--project",
        str(project.root),
        *IMPORT,
        "--max-concurrent",
        "3",
        "--heartbeat-interval",
        "0.2",
        "--heartbeat-stale",
        "1.0",
        "--log-level",
        "WARNING",
    ]
    env = {
        "PYTHONPATH": ROOT,
        "NW_TEST_DISK_FULL": str(full),
        "NW_TEST_FAULT_LOG": str(faults),
    }
    import os

    proc = subprocess.Popen(
        args,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=open(log_path, "w"),  # noqa: SIM115
    )
    return proc, faults, full


def test_a_finish_refused_by_a_full_disk_is_kept_and_recorded_once_space_returns(
    project, sqlite_cfg, tmp_path
):
    cfg = sqlite_cfg
    # Given three paid jobs of a retryable kind, run by a worker whose finishes
    # fail as a full disk fails them
    log = tmp_path / "runs.log"
    paid = [
        jobs.enqueue(project, "pr.returns", {"log": str(log), "i": i, "usd": 2.0}, config=cfg)
        for i in range(3)
    ]
    ids = {job.job_id for job in paid}
    worker, faults, full = _faulty_worker(project, tmp_path, tmp_path / "worker.log")

    def refused() -> Counter:
        return Counter(faults.read_text().split())

    try:
        # While the disk is full: each finish is kept in the journal and tried
        # again and again, and its job reads running to every reader (each
        # get_job here may reap), past heartbeat_stale (1 s) and worker_stale
        # (6 s): seven tries each are 0.1 + 0.2 + ... + 3.2 s = 6.3 s of back-off
        def tried_long_enough():
            tried = refused()
            states = {i: jobs.get_job(project, i, config=cfg).status for i in ids}
            assert all(states[i] == jobs.RUNNING for i in tried), states  # never reaped
            assert set(states.values()) <= {jobs.QUEUED, jobs.RUNNING}, states
            return len(tried) == 3 and min(tried.values()) >= 7

        wait_until(tried_long_enough, timeout=60, what="seven refused tries of each finish")
        kept = {p.name.split(".")[0] for p in journal_dir(project.root).glob("*.json")}
        assert kept == ids
        full.unlink()  # When space comes back
        done = [_ended(project, job.job_id, cfg) for job in paid]
    finally:
        stop(worker)
    # Then each is recorded succeeded with its cost, once, and the body ran once
    assert [j.status for j in done] == [jobs.SUCCEEDED] * 3, [j.error for j in done]
    assert [j.cost.actual_usd for j in done] == [2.0] * 3
    assert all(j.attempt == 1 and j.attempts[-1]["ended"] == "succeeded" for j in done)
    assert jobs.spend(project, config=cfg)["actual_usd"] == 6.0
    assert _runs(log) == 3
    assert not list(journal_dir(project.root).glob("*.json"))  # settled: nothing left
    said = (tmp_path / "worker.log").read_text()
    assert "could not record its outcome" in said and "is recorded" in said


def test_a_worker_killed_with_a_finish_pending_leaves_it_to_the_next_which_replays_it(
    project, sqlite_cfg, tmp_path
):
    cfg = sqlite_cfg
    log = tmp_path / "runs.log"
    job = jobs.enqueue(project, "pr.returns", {"log": str(log), "usd": 2.0}, config=cfg)
    # Given a worker whose store never takes its finish
    first, _faults, _full = _faulty_worker(project, tmp_path, tmp_path / "first.log")
    try:
        journaled = wait_until(
            lambda: list(journal_dir(project.root).glob("*.json")), timeout=30, what="journal"
        )
        assert stored_record(project, cfg, job.job_id)["finished_at"] is None
    finally:  # When it is killed with the finish pending
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert journaled[0].name.startswith(job.job_id) and journaled[0].parent.name == DIRNAME
    # Then the next worker replays it before it claims or reaps anything
    second = start_worker(project, extra=IMPORT)
    try:
        done = _ended(project, job.job_id, cfg)
    finally:
        stop(second)
    assert done.status == jobs.SUCCEEDED and done.cost.actual_usd == 2.0
    assert done.attempt == 1 and [a["ended"] for a in done.attempts] == ["succeeded"]
    assert jobs.spend(project, config=cfg)["actual_usd"] == 2.0
    assert _runs(log) == 1  # a retryable kind, never run again
    assert not list(journal_dir(project.root).glob("*.json"))


def test_a_job_whose_finish_is_kept_reads_finishing_in_its_process_and_a_cancel_answers(
    project, sqlite_cfg, monkeypatch
):
    """In-process: the finish fails until the store is let go; the job reads
    finishing from this process, a cancel answers at once, and the result wins."""
    cfg = sqlite_cfg
    from nw.jobs.stores.sqlite import SqliteJobStore

    real, refusing = SqliteJobStore.finish, [True]

    def finish(self, job_id, **kw):
        if refusing[0]:
            with self._driver_errors():
                raise sqlite3.OperationalError("database or disk is full")
        return real(self, job_id, **kw)

    monkeypatch.setattr(SqliteJobStore, "finish", finish)
    ran = []

    def body(project, params):
        ran.append(1)
        return {"cost_usd_actual": 1.0}

    job = jobs.enqueue(project, "r", {}, dispatch={"r": body}, config=cfg)
    finishing = wait_until(
        lambda: (
            (j := jobs.get_job(project, job.job_id, config=cfg)).label_hint == FINISHING_HINT and j
        ),
        what="finishing",
    )
    assert finishing.status == jobs.RUNNING
    cancelled = jobs.cancel_job(project, job.job_id, config=cfg)  # answers, does not hang
    assert cancelled.status in (jobs.CANCELLING, jobs.CANCELLED)
    refusing[0] = False
    done = _ended(project, job.job_id, cfg, timeout=30)
    assert done.cost.actual_usd == 1.0 and ran == [1]
    assert done.text_replaced is None
    assert done.status == jobs.CANCELLED and done.result == {"cost_usd_actual": 1.0}


def _mount_tmpfs(where, size: str) -> bool:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _fill(disk) -> None:
    """Write a file on ``disk`` until it is full."""
    chunk = b"\0" * 65536
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            return


def test_a_real_full_disk_refuses_the_finish_until_space_returns(tmp_path):
    """The same on a real full disk (a small tmpfs under the project): the
    store, the journal and the beats all fail; the outcome is kept in memory
    and recorded once space returns; the body ran once."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "8m"):
        pytest.xfail("cannot mount a tmpfs here (needs root); the injected full disk stands")
    import nw

    worker = None
    try:
        project = nw.Project.init(disk / "proj", title="full disk")
        cfg = jobs.JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0)
        log, go, said = tmp_path / "runs.log", tmp_path / "go", tmp_path / "worker.log"
        job = jobs.enqueue(
            project, "pr.held", {"log": str(log), "go": str(go), "usd": 2.0}, config=cfg
        )
        worker = start_worker(project, extra=IMPORT, log_path=said)
        wait_until(lambda: _runs(log) == 1, timeout=30, what="the body to start")
        _fill(disk)  # the disk is full while the body runs
        go.touch()  # and then it returns
        wait_until(lambda: "could not record its outcome" in said.read_text(), timeout=30)
        assert stored_record(project, cfg, job.job_id)["finished_at"] is None  # reads work
        (disk / "filler").unlink()  # space returns
        done = _ended(project, job.job_id, cfg)
        assert done.status == jobs.SUCCEEDED and done.cost.actual_usd == 2.0
        assert done.attempt == 1 and jobs.spend(project, config=cfg)["actual_usd"] == 2.0
        assert _runs(log) == 1
        assert "could not be journaled" in said.read_text()  # the journal was full too
    finally:
        if worker is not None:
            stop(worker)
        from nw.jobs.execution.runtimes import shutdown_runtimes
        from nw.jobs.stores import close_shared_stores

        shutdown_runtimes(wait=False)
        close_shared_stores()
        subprocess.run(["umount", "-l", str(disk)], check=False)


# ----- one malformed row hurts only itself -----------------------------------------------
def test_one_malformed_row_hurts_only_itself(project, sqlite_cfg):
    cfg = dataclasses.replace(sqlite_cfg, budget_usd=100.0)
    ok = {"r": lambda project, params: {"cost_usd_actual": 1.5}}
    good = jobs.enqueue(project, "r", {"i": 1, "estimated_usd": 0.5}, dispatch=ok, config=cfg)
    bad = jobs.enqueue(project, "r", {"i": 2, "estimated_usd": 0.5}, dispatch=ok, config=cfg)
    odd = jobs.enqueue(project, "r", {"i": 3, "estimated_usd": 0.5}, dispatch=ok, config=cfg)
    wait_until(lambda: all(j.is_terminal for j in jobs.list_jobs(project, config=cfg)))
    path = project.root / cfg.jobs_dirname / "jobs.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE jobs SET doc = '{not json' WHERE job_id = ?", (bad.job_id,))
        conn.execute(  # a cost that is text, not a number: counted as absent
            "UPDATE jobs SET doc = json_set(doc, '$.actual_usd', '7.0') WHERE job_id = ?",
            (odd.job_id,),
        )
    spent = jobs.spend(project, config=cfg)
    assert spent["actual_usd"] == 1.5  # the good row; the bad and the odd add nothing
    budget = jobs.set_budget(project, 50.0, per="day", config=cfg)  # a stored budget too
    assert budget["spent_usd"] == 1.5, budget
    assert [b["spent_usd"] for b in jobs.list_budgets(project, config=cfg)] == [1.5]
    (row,) = jobs.cost_accuracy(project, config=cfg)  # quoted against billed: the good row
    assert row["jobs"] == 1 and row["billed_usd"] == 1.5
    more = jobs.enqueue(project, "r", {"i": 4, "estimated_usd": 0.5}, dispatch=ok, config=cfg)
    assert more.job_id not in (good.job_id, bad.job_id)
    wait_until(lambda: jobs.get_job(project, more.job_id, config=cfg).is_terminal)
    totals = console.totals(project, config=cfg)
    assert totals["spend"]["today"]["usd"] == 3.0  # good + more
    assert totals["counts"]["by_status"] == {"succeeded": 3, "failed": 1}
    data = console.metrics(project, config=cfg)
    assert data["spend"]["actual_usd"] == 3.0
    assert data["finished"][("failed", "error")] == 1
    listed = {j.job_id: j for j in jobs.list_jobs(project, config=cfg)}
    assert listed[bad.job_id].status == jobs.FAILED and "unreadable" in listed[bad.job_id].error
    assert listed[good.job_id].status == jobs.SUCCEEDED


# ----- secrets -------------------------------------------------------------------------
SECRET = "fal-key-0123456789abcdef"


def test_a_secret_in_a_result_is_scrubbed_before_it_is_stored(cfg, project, tmp_path):
    log = tmp_path / "runs.log"
    job = jobs.enqueue(project, "pr.echo", {"log": str(log)}, config=cfg)
    worker = start_worker(
        project,
        database_url=cfg.database_url,
        extra=IMPORT,
        env={"NW_SECRET_FAL": SECRET},
    )
    try:
        done = _ended(project, job.job_id, cfg)
    finally:
        stop(worker)
    assert done.status == jobs.SUCCEEDED and _runs(log) == 1
    assert done.result == {
        "echo": "***",
        "deep": [{"k": "Bearer ***"}],
        "***": 1,
        "cost_usd_actual": 0.1,
    }
    if cfg.database_url:
        from tests.conftest import postgres_rows

        assert SECRET not in postgres_rows(project)
    else:
        from nw.jobs.stores import open_store

        store = open_store(project, cfg, create=False)
        store.close()  # checkpointed: every byte is in the files read below
        files = (project.root / cfg.jobs_dirname).iterdir()
        assert SECRET.encode() not in b"".join(p.read_bytes() for p in files if p.is_file())


def test_a_secrets_providers_failure_is_logged_by_type_without_its_text(project, caplog):
    from nw.jobs.execution import credentials
    from nw.jobs.execution.body import Launch
    from nw.jobs.execution.worker import Worker

    def provider(kind, params):
        raise RuntimeError(f"vault said no to {SECRET}")

    worker = Worker([project], config=jobs.JobsConfig(), kinds_=["pr.echo"], secrets=provider)
    try:
        launch = Launch(fn=paid_results.echo, project=project)
        with caplog.at_level(logging.DEBUG, logger="nw.jobs"):
            credentials.attach_secrets(worker._secrets, "pr.echo", {}, launch)
    finally:
        for rt in worker.runtimes:
            rt.close(wait=False)
        worker._reaping.close()
        worker._listener.close()
    assert launch.secrets == {}
    said = "\n".join(
        r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records
    )
    assert "secrets provider failed for kind pr.echo: RuntimeError" in said
    assert SECRET not in said and "vault said no" not in said
    assert not any(r.exc_info for r in caplog.records)
