"""``nw-jobs`` through its real entry point, in a subprocess (``python -m nw.cli``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nw
from nw.jobs import JobRefused, enqueue, get_job
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.execution.runtimes import shutdown_runtimes
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]


def nw_jobs(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 60):
    """Run ``nw-jobs ARGS`` as a user would; returns the CompletedProcess."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NW_JOBS_")}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "nw.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nw-jobs: error: ")
    assert fragment in lines[0]


# ----- bodies and fixtures ------------------------------------------------------------------
def paid(project, params, *, on_event):
    on_event({"stage_index": 1, "stage_count": 2, "current_transform": "render"})
    return {"cost_usd_actual": 0.5, "has_unknown_costs": params.get("unknown", False)}


def refuses(project, params):
    raise JobRefused("no voice cast")


def queued_only(project, params):  # registered for a worker that never comes
    return None


def _finish(project, job):
    return wait_until(
        lambda: (j := get_job(project, job.job_id)) is not None and j.is_terminal and j,
        what="the job to finish",
    )


@pytest.fixture
def jobs(project):
    """A project with a success (exact cost), a lower-bound success, and a refusal."""
    ok = _finish(project, enqueue(project, "paid", {"n": 1}, dispatch={"paid": paid}))
    low = _finish(
        project, enqueue(project, "paid", {"n": 2, "unknown": True}, dispatch={"paid": paid})
    )
    bad = _finish(project, enqueue(project, "refuses", {}, dispatch={"refuses": refuses}))
    shutdown_runtimes()
    return {"ok": ok, "low": low, "bad": bad}


@pytest.fixture
def queued(project):
    register_kind("test.queued", "tests.cli.test_cli:queued_only")
    job = enqueue(project, "test.queued", {"x": 1})
    yield job
    unregister_kind("test.queued")


# ----- list / show ----------------------------------------------------------------------------
def test_list_json_is_the_to_dict_contract(project, jobs):
    result = nw_jobs("list", "--project", str(project.root), "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert {j["job_id"] for j in listed} == {j.job_id for j in jobs.values()}
    by_id = {j["job_id"]: j for j in listed}
    assert by_id[jobs["low"].job_id]["cost"]["actual_is_lower_bound"] is True
    assert by_id[jobs["bad"].job_id]["grade"] == "warning"


def test_list_table_shows_costs_honestly(project, jobs):
    result = nw_jobs("list", "--project", str(project.root), env={"COLUMNS": "160"})
    assert result.returncode == 0, result.stderr
    assert "≥ $0.50" in result.stdout  # the lower bound
    assert "$0.50" in result.stdout
    assert "failed" in result.stdout and "succeeded" in result.stdout


def test_list_filters_by_status_and_defaults_to_the_env_project(project, jobs):
    result = nw_jobs(
        "list", "--status", "failed", "--json", env={"NW_JOBS_PROJECT": str(project.root)}
    )
    assert result.returncode == 0, result.stderr
    assert [j["job_id"] for j in json.loads(result.stdout)] == [jobs["bad"].job_id]


def test_list_defaults_to_the_current_folder(project, jobs):
    result = nw_jobs("list", "--json", cwd=project.root)
    assert len(json.loads(result.stdout)) == 3


def test_show_by_full_id_and_by_prefix(project, jobs):
    job_id = jobs["ok"].job_id
    full = nw_jobs("show", job_id, "--project", str(project.root), "--json")
    assert full.returncode == 0, full.stderr
    assert json.loads(full.stdout)["job_id"] == job_id
    short = nw_jobs("show", job_id[:12], "--project", str(project.root))
    assert short.returncode == 0, short.stderr
    assert job_id in short.stdout and "succeeded" in short.stdout


# ----- user mistakes: one line, exit 1 ---------------------------------------------------------
def test_bad_id_is_one_line(project, jobs):
    one_line_error(nw_jobs("show", "not-an-id", "--project", str(project.root)), "not a job id")


def test_unknown_id_is_one_line(project, jobs):
    one_line_error(nw_jobs("show", "0" * 64, "--project", str(project.root)), "no job")
    one_line_error(nw_jobs("cancel", "0" * 64, "--project", str(project.root)), "no job")
    one_line_error(nw_jobs("watch", "ffff", "--project", str(project.root)), "no job")


def test_missing_project_is_one_line(tmp_path):
    missing = tmp_path / "nowhere"
    one_line_error(nw_jobs("list", "--project", str(missing)), "does not exist")
    assert not missing.exists()


def test_malformed_params_are_one_line(project):
    bad = nw_jobs("estimate", "k", "--params", "{nope", "--project", str(project.root))
    one_line_error(bad, "--params is not valid JSON")
    arr = nw_jobs("estimate", "k", "--params", "[1]", "--project", str(project.root))
    one_line_error(arr, "must be a JSON object")


def test_bad_status_is_one_line(project):
    result = nw_jobs("list", "--status", "bogus", "--project", str(project.root))
    one_line_error(result, "unknown status")


def test_usage_errors_exit_2(project):
    assert nw_jobs("list", "--bogus").returncode == 2
    assert nw_jobs().returncode == 2
    assert nw_jobs("--version").stdout.startswith("nw-jobs ")


# ----- estimate / summarize / cancel / watch ---------------------------------------------------
def test_estimate_json(project):
    params = json.dumps({"estimated_usd": 2.5})
    kind = ("t.noop", "--import", "tests.fixtures.bodies")
    result = nw_jobs(
        "estimate", *kind, "--params", params, "--project", str(project.root), "--json"
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["estimated_usd"] == 2.5 and body["requires_approval"] is True
    text = nw_jobs("estimate", *kind, "--project", str(project.root))
    assert "unknown" in text.stdout and "requires approval" in text.stdout


def test_enqueue_one_job_and_a_batch_all_or_nothing(project, tmp_path):
    where = ("--project", str(project.root), "--import", "tests.fixtures.bodies")
    one = nw_jobs("enqueue", "t.noop", "--params", '{"i": 0}', *where, "--json")
    assert one.returncode == 0, one.stderr
    first = json.loads(one.stdout)
    assert first["status"] == "queued" and first["params"] == {"i": 0}
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([["t.noop", {"i": 0}], {"kind": "t.noop", "params": {"i": 1}}]))
    many = nw_jobs("enqueue", "--batch", str(batch), *where, "--json")
    assert many.returncode == 0, many.stderr
    got = json.loads(many.stdout)
    assert [j["params"] for j in got] == [{"i": 0}, {"i": 1}]
    assert got[0]["job_id"] == first["job_id"]  # a live job: the same job back
    batch.write_text(json.dumps([["t.noop", {"i": 2}], ["t.nope", {}]]))
    bad = nw_jobs("enqueue", "--batch", str(batch), *where)
    assert bad.returncode == 1
    assert bad.stderr.startswith("nw-jobs: error: item 1: unknown kind 't.nope'"), bad.stderr
    listed = nw_jobs("list", "--project", str(project.root), "--json")
    assert sorted(j["params"]["i"] for j in json.loads(listed.stdout)) == [0, 1]
    neither = nw_jobs("enqueue", *where)
    assert neither.returncode == 1 and "a KIND or --batch FILE" in neither.stderr


def test_summarize_reads_several_roots_without_writing(tmp_path, project, jobs):
    empty = nw.Project.init(tmp_path / "empty")
    result = nw_jobs("summarize", str(project.root), str(empty.root), "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {r["project"] for r in rows} == {str(project.root)}
    assert len(rows) == 3
    assert not (empty.root / ".nw" / "jobs").exists()
    table = nw_jobs("summarize", str(project.root), str(empty.root))
    assert "no jobs" in table.stdout


def test_cancel_a_queued_job_then_watch_says_cancelled(project, queued):
    cancelled = nw_jobs("cancel", queued.job_id, "--project", str(project.root), "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    watched = nw_jobs("watch", queued.job_id[:10], "--project", str(project.root))
    assert watched.returncode == 4
    assert "cancelled" in watched.stdout


def test_watch_exit_codes_say_how_the_job_ended(project, jobs):
    root = str(project.root)
    assert nw_jobs("watch", jobs["ok"].job_id, "--project", root).returncode == 0
    failed = nw_jobs("watch", jobs["bad"].job_id, "--project", root, "--json")
    assert failed.returncode == 3
    assert json.loads(failed.stdout.splitlines()[-1])["status"] == "failed"


def test_watch_times_out_on_a_job_that_never_starts(project, queued):
    result = nw_jobs("watch", queued.job_id, "--project", str(project.root), "--timeout", "0.5")
    assert result.returncode == 124
    assert "queued" in result.stdout


def test_watch_follows_a_running_job_to_its_end(project, gate):
    job = enqueue(project, "held", {}, dispatch={"held": gate})
    assert gate.started.wait(5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NW_JOBS_")}
    env["PYTHONPATH"] = str(REPO)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "nw.cli", "watch", job.job_id, "--project", str(project.root)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = watcher.stdout.readline()  # it is watching: the job is running
        assert "running" in first
        gate.release.set()
        out, err = watcher.communicate(timeout=30)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, err
    assert "succeeded" in out.splitlines()[-1]


def test_db_migrate_passes_the_url(monkeypatch):
    import types

    from nw import cli

    urls = []
    fake = types.ModuleType("nw.jobs.stores.postgres")
    fake.migrate = urls.append
    monkeypatch.setitem(sys.modules, "nw.jobs.stores.postgres", fake)
    monkeypatch.setenv("NW_JOBS_DATABASE_URL", "postgresql://env/db")
    assert cli.main(["db", "migrate"]) == 0
    assert cli.main(["db", "migrate", "--database-url", "postgresql://flag/db"]) == 0
    assert urls == ["postgresql://env/db", "postgresql://flag/db"]


def test_worker_and_db_say_what_is_wrong_in_one_line(project):
    bad = nw_jobs("worker", "--project", str(project.root), "--max-concurrent", "0")
    assert bad.returncode == 2  # our own parser checks what it declares
    for command in (
        ("nw.cli", "worker"),
        ("nw.jobs.execution.worker",),
    ):  # the CLI, and what it runs
        level = subprocess.run(
            [sys.executable, "-m", *command, "--project", str(project.root), "--log-level", "loud"],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert level.returncode == 2 and "Traceback" not in level.stderr, level.stderr
        assert "--log-level: invalid choice: 'LOUD'" in level.stderr.strip().splitlines()[-1]
    db = nw_jobs("db", "migrate")
    one_line_error(db, "needs --database-url or NW_JOBS_DATABASE_URL")


# ----- demo ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_demo_runs_end_to_end_and_learns_etas_on_the_second_run(tmp_path):
    folder = tmp_path / "demo"
    first = nw_jobs("demo", "--project", str(folder), "--speed", "4", "--json")
    assert first.returncode == 0, first.stderr
    run1 = json.loads(first.stdout)
    assert run1["run"] == 1 and run1["finished"]
    statuses = sorted(j["status"] for j in run1["jobs"])
    assert statuses.count("succeeded") == 6
    assert statuses.count("failed") == 1 and statuses.count("cancelled") == 1
    assert run1["totals"]["spent_is_lower_bound"] is True
    assert run1["totals"]["saved_usd"] > 0
    assert any(j["cached"] for j in run1["jobs"])
    assert run1["totals"]["learned_etas"] == 0
    assert run1["pipeline"]["quote"]["estimated_usd"] == pytest.approx(1.062)
    assert run1["pipeline"]["status"] == "failed"  # the narration was refused
    assert {j["pipeline_id"] for j in run1["jobs"]} == {run1["pipeline"]["pipeline_id"]}
    assert "≥ $" in first.stderr  # the lower-bound cost, shown as one
    second = nw_jobs("demo", "--project", str(folder), "--speed", "4", "--json")
    assert second.returncode == 0, second.stderr
    run2 = json.loads(second.stdout)
    assert run2["run"] == 2
    assert {j["job_id"] for j in run2["jobs"]}.isdisjoint(j["job_id"] for j in run1["jobs"])
    learned = {j["kind"] for j in run2["jobs"] if j["confidence"] == "learned"}
    assert {"panel.render", "panel.animate"} <= learned
    assert "(learned)" in second.stderr
    listed = nw_jobs("list", "--project", str(folder), "--json", "--limit", "100")
    assert len(json.loads(listed.stdout)) == 16


@pytest.mark.slow
def test_demo_without_a_tty_prints_plain_lines(tmp_path):
    # Given a database URL in the environment / Then the demo still uses the embedded store
    env = {"NW_JOBS_DATABASE_URL": "postgresql://nowhere.invalid/none"}
    result = nw_jobs("demo", "--project", str(tmp_path / "d"), "--speed", "4", env=env)
    assert (tmp_path / "d" / ".nw" / "jobs" / "jobs.sqlite3").exists()
    assert "NW_JOBS_DATABASE_URL ignored" in result.stderr
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout  # no escape codes in a pipe
    assert "Score: main theme | cancelled" in result.stdout
    # the whole pipeline, quoted and timed as one, before anything ran
    assert "pipeline The Lighthouse Keeper, run 1: quote $1.06 for 8 steps · ETA" in result.stdout
    assert "no voice is cast" in result.stdout
    assert "Run it again" in result.stdout


def test_db_migrate_against_a_real_database_is_idempotent():
    from tests.conftest import require_postgres

    url = require_postgres()  # migrates once for the session; the command must agree
    first = nw_jobs("db", "migrate", "--database-url", url)
    again = nw_jobs("db", "migrate", env={"NW_JOBS_DATABASE_URL": url})
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert again.stdout.strip() == "the schema is up to date"


def test_the_cli_answers_by_type_a_store_fault_in_one_line_a_bug_with_its_traceback(
    project, monkeypatch, capsys
):
    import nw.jobs
    from nw.cli import EXIT_ERROR, main

    def store_gone(*args, **kwargs):
        raise nw.jobs.JobStoreError("job store postgresql://db: the database is unreachable")

    monkeypatch.setattr(nw.jobs, "list_jobs", store_gone)
    assert main(["list", "--project", str(project.root)]) == EXIT_ERROR
    assert capsys.readouterr().err.splitlines() == [
        "nw-jobs: error: job store postgresql://db: the database is unreachable"
    ]

    def bug(*args, **kwargs):
        raise ValueError("an internal slip, not the user's")

    # A built-in error is no longer taken for a user's mistake: it keeps its traceback.
    monkeypatch.setattr(nw.jobs, "list_jobs", bug)
    with pytest.raises(ValueError, match="internal slip"):
        main(["list", "--project", str(project.root)])


def test_limits_set_list_remove(project):
    env = {"NW_JOBS_PROJECT": str(project.root)}
    got = nw_jobs("limits", "set", "fal:kling", "--max-running", "2", env=env)
    assert got.returncode == 0, got.stderr
    assert "fal:kling: running 0 of 2 (project)" in got.stdout
    nw_jobs("limits", "set", "voice", "--per-second", "10", env=env)
    listed = json.loads(nw_jobs("limits", "--json", env=env).stdout)
    assert [(lim["key"], lim["max_running"], lim["per_second"]) for lim in listed] == [
        ("fal:kling", 2, None),
        ("voice", None, 10),
    ]
    assert nw_jobs("limits", "remove", "voice", env=env).returncode == 0
    assert [lim["key"] for lim in json.loads(nw_jobs("limits", "--json", env=env).stdout)] == [
        "fal:kling"
    ]
    one_line_error(nw_jobs("limits", "set", "x", "--per-second", "0", env=env), "per_second")
    one_line_error(nw_jobs("limits", "set", "x", env=env), "--max-running")
    one_line_error(nw_jobs("limits", "remove", env=env), "needs a KEY")
