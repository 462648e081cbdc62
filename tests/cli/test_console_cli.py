"""The console's commands (show in full, list pages, spend, workers, retry, prune)
and each newcomer's stumble, through the real entry point in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from nw import Project
from nw.jobs import enqueue, get_job, list_jobs
from nw.jobs.core.kinds import unregister_kind
from nw.jobs.execution.runtimes import shutdown_runtimes
from tests.cli.test_cli import REPO, nw_jobs, one_line_error
from tests.fixtures import bodies
from tests.helpers import wait_until

KIND = "t.once"  # registered by tests.fixtures.bodies, which a worker or the CLI imports


def staged(project, params, *, on_event):
    on_event({"stage_index": 0, "stage_count": 2, "current_transform": "sketch"})
    on_event({"stage_index": 1, "stage_count": 2, "current_transform": "colour"})
    return {
        "cost_usd_actual": 0.25,
        "has_unknown_costs": False,
        "cache_hit_savings_usd": 0.05,
        "artifact_ref": "art-7",
    }


def boom(project, params):
    raise RuntimeError("out of VRAM")


@pytest.fixture
def history(project):
    """Five finished jobs (four succeeded with stages and a cost, one failed)."""
    bodies.register_all()
    jobs = [
        enqueue(
            project,
            "paint",
            {"n": i, "title": f"Panel {i}"},
            dispatch={"paint": staged},
            actor="ann",
        )
        for i in range(4)
    ]
    jobs.append(enqueue(project, KIND, {"n": 9}, dispatch={KIND: boom}, actor="bob"))
    for job in jobs:
        wait_until(lambda job=job: get_job(project, job.job_id).is_terminal, what="finished")
    shutdown_runtimes()
    return [get_job(project, j.job_id) for j in jobs]


def run(*args, project, **kw):
    root = project.root if isinstance(project, Project) else project  # a Path has .root too
    return nw_jobs(*args, "--project", str(root), **kw)


# ----- show ---------------------------------------------------------------------------
def test_show_tells_everything_about_a_job(project, history):
    done, failed = history[0], history[-1]
    out = run("show", done.job_id[:6], project=project)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for fragment in (
        done.job_id,
        "Panel 0",
        "ann",
        "succeeded",
        "grade",
        "ok",
        "estimated unknown",
        "actual $0.25 (exact)",
        "cache saved $0.05",
        "attempts",
        "succeeded",
        "progress trail",
        "sketch",
        "colour",
        "params",
        '"title": "Panel 0"',
        "result",
        "art-7",
        "created",
        "finished",
    ):
        assert fragment in text, fragment
    bad = run("show", failed.job_id[:8], project=project).stdout
    assert "out of VRAM" in bad and "failed" in bad and "crashed" in bad
    data = json.loads(run("show", done.job_id, "--json", project=project).stdout)
    assert data["attempts"][0]["ended"] == "succeeded"
    assert [b["stage"]["current_transform"] for b in data["progress_trail"]][:2] == [
        "sketch",
        "colour",
    ]


def test_a_short_id_says_a_4_hex_prefix_works(project, history):
    one_line_error(run("show", "4e9", project=project), "a unique prefix of at least 4")


# ----- list ----------------------------------------------------------------------------
def test_list_keeps_the_id_column_at_80_columns_and_in_a_pipe(project, history):
    for env in ({"COLUMNS": "80"}, {}):  # a pipe: rich's 80 columns unless told otherwise
        out = run("list", project=project, env=env)
        assert out.returncode == 0
        lines = out.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines)
        for job in history:
            assert job.job_id[:12] in out.stdout


def test_list_pages_through_the_whole_history_with_before(project, history):
    seen, before = [], None
    while True:
        args = ["list", "--json", "--limit", "2"] + (["--before", before] if before else [])
        page = json.loads(run(*args, project=project).stdout)
        seen += [j["job_id"] for j in page]
        if len(page) < 2:
            break
        before = page[-1]["job_id"][:12]
    assert seen == [j.job_id for j in list_jobs(project, limit=100)]
    assert len(seen) == 5
    table = run("list", "--limit", "2", project=project).stdout
    assert "older: nw-jobs list --before " in table


def test_list_filters_by_kind_grade_actor_and_label(project, history):
    def ids(*filters):
        return [
            j["job_id"] for j in json.loads(run("list", "--json", *filters, project=project).stdout)
        ]

    assert ids("--kind", KIND) == [history[-1].job_id]
    assert ids("--grade", "error") == [history[-1].job_id]
    assert len(ids("--actor", "ann", "--status", "succeeded")) == 4
    assert ids("-q", "panel 2") == [history[2].job_id]
    one_line_error(run("list", "--grade", "meh", project=project), "unknown grade")


# ----- spend, workers --------------------------------------------------------------
def test_spend_prints_today_and_the_week_by_kind_and_actor(project, history):
    out = run("spend", project=project)
    assert out.returncode == 0
    # the failed job started and reported no cost: the figures are lower bounds
    assert "today (UTC): ≥ $1.00" in out.stdout and "the last 7 days: ≥ $1.00" in out.stdout
    assert "paint" in out.stdout and "ann" in out.stdout
    assert "succeeded 4" in out.stdout and "error 1" in out.stdout
    data = json.loads(run("spend", "--json", project=project).stdout)
    assert data["spend"]["today"]["by_actor"] == {"ann": 1.0, "bob": 0.0}
    assert data["counts"]["by_grade"] == {"ok": 4, "error": 1}


def test_workers_lists_a_running_worker(project, history):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nw.cli",
            "worker",
            "--project",
            str(project.root),
            "--import",
            "tests.fixtures.bodies",
            "--log-level",
            "WARNING",
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        found = wait_until(
            lambda: json.loads(run("workers", "--json", project=project).stdout),
            what="the worker announced",
        )
        (worker,) = found
        assert worker["pid"] == proc.pid and worker["state"] == "live"
        assert "t.noop" in worker["kinds"]
        table = run("workers", project=project).stdout
        assert f"pid {proc.pid}" in table and "live" in table
    finally:
        proc.terminate()
        proc.wait(20)
    assert "no workers announced" in run("workers", project=project).stdout


# ----- retry, prune ------------------------------------------------------------------
def test_retry_one_job_and_in_bulk(project, history):
    failed = history[-1]
    # its body ran in the app's process: without the kind registered, nothing can run it
    one_line_error(run("retry", failed.job_id[:10], project=project), "not registered for workers")
    out = run("retry", failed.job_id[:10], "--import", "tests.fixtures.bodies", project=project)
    assert out.returncode == 0, out.stderr
    assert (
        "1 job(s) queued again" in out.stdout and get_job(project, failed.job_id).status == "queued"
    )
    one_line_error(run("retry", history[0].job_id, project=project), "only a failed or cancelled")
    one_line_error(run("retry", project=project), "retry takes a job id")
    # nothing failed of that kind since then
    none = run("retry", "--failed", "--kind", "paint", "--since", "1h", project=project)
    assert none.returncode == 0 and "nothing to retry" in none.stdout
    one_line_error(run("retry", "--failed", "--since", "last tuesday", project=project), "--since")


def test_prune_keeps_the_spend(project, history):
    before = json.loads(run("spend", "--json", project=project).stdout)
    kept = run("prune", "--older-than", "30d", project=project)
    assert kept.returncode == 0 and "nothing to prune" in kept.stdout
    # a dry run counts, and deletes nothing
    looked = run("prune", "--older-than", "0", "--dry-run", project=project)
    assert looked.returncode == 0 and "5 finished job(s) older than 0s would be" in looked.stdout
    assert len(json.loads(run("list", "--json", project=project).stdout)) == 5
    # without a terminal to ask on, it deletes only when told --yes
    one_line_error(run("prune", "--older-than", "0", project=project), "Pass --yes")
    assert len(json.loads(run("list", "--json", project=project).stdout)) == 5
    gone = run("prune", "--older-than", "0", "--yes", project=project)
    assert "pruned 5 " in gone.stdout
    assert json.loads(run("list", "--json", project=project).stdout) == []
    after = json.loads(run("spend", "--json", project=project).stdout)
    assert after["spend"] == before["spend"] and after["counts"] == before["counts"]
    bad = run("prune", "--older-than", "soon", project=project)
    assert bad.returncode == 2 and "expected an age like 30d" in bad.stderr
    negative = run("prune", "--older-than", "-5d", project=project)
    assert negative.returncode == 2 and "expected an age of 0 or more, got '-5d'" in negative.stderr


def test_a_folder_that_is_not_a_project_is_refused_and_init_makes_one(tmp_path):
    # Given an existing folder that is not a project (a typo of --project)
    folder = tmp_path / "typo"
    folder.mkdir()
    enqueue = ("enqueue", "t.noop", "--params", "{}", "--import", "tests.fixtures.bodies")
    for args in (enqueue, ("list",), ("limits",), ("prune", "--older-than", "1d")):
        one_line_error(run(*args, project=folder), "is not an nw-jobs project")
    assert list(folder.iterdir()) == []  # nothing made in it
    # When it is made a project, the same commands work
    made = run("init", "--title", "Film", project=folder)
    assert made.returncode == 0 and "new project 'Film'" in made.stdout
    assert run("list", project=folder).returncode == 0
    again = run("init", project=folder)
    assert again.returncode == 0 and "already a project 'Film'" in again.stdout


def test_removing_a_limit_that_is_not_there_says_so(project):
    one_line_error(run("limits", "remove", "nothere", project=project), "no limit on key")


# ----- what a newcomer tripped on ------------------------------------------------------
def test_estimate_of_an_unknown_kind_names_it_and_the_known_ones(project):
    out = run("estimate", "no.such.kind", "--import", "tests.fixtures.bodies", project=project)
    one_line_error(out, "unknown kind 'no.such.kind'")
    assert "t.noop" in out.stderr


def test_estimate_with_a_malformed_plan_says_why_in_one_line(project):
    params = json.dumps({"plan": {"calls": 5}})
    out = run(
        "estimate",
        "t.noop",
        "--import",
        "tests.fixtures.bodies",
        "--params",
        params,
        project=project,
    )
    one_line_error(out, "plan['calls'] must be a list")


def test_demo_on_a_file_is_one_line(tmp_path):
    afile = tmp_path / "passwd"
    afile.write_text("root:x:0:0\n")
    one_line_error(nw_jobs("demo", "--project", str(afile)), "not a folder")


def test_worker_imports_a_module_from_the_current_folder_and_logs_each_job(project, tmp_path):
    here = tmp_path / "app"
    here.mkdir()
    (here / "mykinds.py").write_text(
        textwrap.dedent("""
        from nw.jobs import register_kind
        register_kind("my.kind", "mykinds:render")
        def render(project, params):
            return {"ok": True}
    """)
    )
    sys.path.insert(0, str(here))
    try:
        import mykinds  # noqa: F401  (registers my.kind here, so enqueue knows it)

        job = enqueue(project, "my.kind", {"n": 1})
    finally:
        sys.path.remove(str(here))
        unregister_kind("my.kind")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)  # the repo only: mykinds is found in the current folder
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nw.cli",
            "worker",
            "--project",
            str(project.root),
            "--import",
            "mykinds",
            "--log-level",
            "INFO",
        ],
        cwd=here,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: get_job(project, job.job_id).status == "succeeded",
            timeout=30,
            what="the job run by the worker",
        )
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    short = job.job_id[:12]
    assert f"end   my.kind {short} attempt 1: succeeded in" in err
    assert f"start my.kind {short}" not in err  # one line per job at INFO; starts at DEBUG


def test_a_worker_with_no_kinds_says_what_to_do(project):
    out = nw_jobs("worker", "--project", str(project.root))
    assert out.returncode == 2
    assert "no kinds to run" in out.stderr and "--import MODULE" in out.stderr


def test_serve_on_a_taken_port_says_so_before_announcing_a_url(project):
    pytest.importorskip("uvicorn")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = nw_jobs("serve", "--project", str(project.root), "--port", str(port), timeout=30)
    one_line_error(out, f"port {port} on 127.0.0.1 is taken")
    assert "http://" not in out.stderr + out.stdout
