"""A read that reaps tells the truth: a status page holds that status only, and
stays full; the reaps it does are not printed into a CLI user's output."""

from __future__ import annotations

import os
import subprocess
import sys

from nw import jobs
from tests.helpers import REPO, python_process, wait_until

DEAD_SCRIPT = """
    import time
    from nw import jobs
    cfg = jobs.JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, database_url={url!r})
    body = {{"slow": lambda project, params: time.sleep(60)}}
    root = {root!r}
    made = [jobs.enqueue(root, "slow", {{"dead": n}}, dispatch=body, config=cfg) for n in range(3)]
    while any(jobs.get_job(root, j.job_id, config=cfg).status != "running" for j in made):
        time.sleep(0.01)
    print(" ".join(j.job_id for j in made), flush=True)
    time.sleep(60)
"""


def _three_running_then_three_dead(project, cfg, gate) -> tuple[list[str], list[str]]:
    """Three live running jobs held here, then three newer ones whose process is killed."""
    live = [
        jobs.enqueue(project, "r", {"n": n}, dispatch={"r": gate}, config=cfg) for n in range(3)
    ]
    wait_until(
        lambda: all(jobs.get_job(project, j.job_id, config=cfg).status == "running" for j in live)
    )
    script = DEAD_SCRIPT.format(url=cfg.database_url, root=str(project.root))
    with python_process(script) as proc:
        dead = proc.stdout.readline().split()
    return [j.job_id for j in live], dead


def test_a_running_page_that_reaps_holds_only_running_jobs_and_stays_full(project, cfg, gate):
    live, dead = _three_running_then_three_dead(project, cfg, gate)
    # The newest three running rows are the dead ones: the read reaps all of them.
    page = jobs.list_jobs(project, status="running", limit=3, config=cfg)
    assert sorted(j.job_id for j in page) == sorted(live)
    assert {j.status for j in page} == {jobs.RUNNING}
    assert {jobs.get_job(project, d, config=cfg).status for d in dead} == {jobs.FAILED}


def test_the_api_and_the_cli_read_running_pages_honestly_and_quietly(project, cfg, gate):
    import warnings

    with warnings.catch_warnings():  # newer Starlette nudges towards httpx2; httpx still works
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from nw.jobs.web import create_app

    live, dead = _three_running_then_three_dead(project, cfg, gate)
    client = TestClient(create_app([project], config=cfg))
    body = client.get("/api/jobs", params={"status": "running", "limit": 2}).json()
    assert len(body["jobs"]) == 2 and {j["status"] for j in body["jobs"]} == {"running"}
    assert {j["job_id"] for j in body["jobs"]} <= set(live)
    assert {jobs.get_job(project, d, config=cfg).status for d in dead} == {jobs.FAILED}
    # A second, dead, process: its page is reaped by the CLI's own read.
    script = DEAD_SCRIPT.format(url=cfg.database_url, root=str(project.root))
    with python_process(script) as proc:
        more_dead = proc.stdout.readline().split()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NW_JOBS_")}
    env["PYTHONPATH"] = REPO
    if cfg.database_url:
        env["NW_JOBS_DATABASE_URL"] = cfg.database_url
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nw.cli",
            "list",
            "--project",
            str(project.root),
            "--status",
            "running",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # the reaps it did are events for the log, not the user's screen
    listed = [j["job_id"] for j in __import__("json").loads(out.stdout)]
    assert sorted(listed) == sorted(live)
    assert {jobs.get_job(project, d, config=cfg).status for d in more_dead} == {jobs.FAILED}
