"""``nw-jobs pipeline`` through the real entry point: run a file of steps,
show it by its id or one of its jobs', estimate, cancel; refusals in one line;
``show`` and ``list`` name the pipeline a job belongs to."""

from __future__ import annotations

import json

from nw import jobs
from tests.cli.test_cli import nw_jobs, one_line_error

IMPORTS = ("--import", "tests.fixtures.pipeline_bodies")
STEPS = {
    "board": {"kind": "p.step", "params": {"name": "board", "estimated_usd": 0.25}},
    "panel": {"kind": "p.step", "params": {"name": "panel"}, "after": ["board"]},
}


def test_run_show_estimate_cancel(project, tmp_path):
    where = ("--project", str(project.root))
    spec = tmp_path / "steps.json"
    spec.write_text(json.dumps({"steps": STEPS}))
    made = nw_jobs("pipeline", "run", str(spec), "--label", "film", *where, *IMPORTS, "--json")
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    pid, panel = body["pipeline_id"], body["steps"][1]["job"]["job_id"]
    assert body["quote"] == {"estimated_usd": 0.25, "lower_bound": True, "unknown_steps": ["panel"]}
    shown = nw_jobs("pipeline", "show", panel[:12], *where)
    assert shown.returncode == 0, shown.stderr
    assert f"pipeline {pid} film: queued, 0% of 2 steps, quote ≥ $0.25" in shown.stdout
    assert "panel" in shown.stdout and "waiting: after board" in shown.stdout
    assert f"step panel of {pid}" in nw_jobs("show", panel[:12], *where).stdout
    listed = nw_jobs("list", *where, "--json")
    assert {j["pipeline_id"] for j in json.loads(listed.stdout)} == {pid}
    quoted = nw_jobs("pipeline", "estimate", str(spec), *where, *IMPORTS)
    assert quoted.returncode == 0 and "≥ $0.25" in quoted.stdout
    gone = nw_jobs("pipeline", "cancel", pid, *where, "--json")
    assert gone.returncode == 0 and json.loads(gone.stdout)["status"] == "cancelled"


def test_refusals_are_one_line_and_write_nothing(project, tmp_path):
    where = ("--project", str(project.root))
    spec = tmp_path / "steps.json"
    spec.write_text(
        json.dumps(
            {"a": {"kind": "p.step", "after": ["b"]}, "b": {"kind": "p.step", "after": ["a"]}}
        )
    )
    one_line_error(nw_jobs("pipeline", "run", str(spec), *where, *IMPORTS), "pipeline has a cycle")
    spec.write_text("{nope")
    one_line_error(nw_jobs("pipeline", "run", str(spec), *where, *IMPORTS), "is not JSON")
    spec.write_bytes(b"\xff{}")
    one_line_error(nw_jobs("pipeline", "run", str(spec), *where), "is not UTF-8 text")
    one_line_error(
        nw_jobs("pipeline", "show", "pl-none", *where, "--import", "no_such_module_here"),
        "--import no_such_module_here: No module named",
    )
    one_line_error(
        nw_jobs("enqueue", "--batch", str(spec), *where), f"--batch {spec} is not UTF-8 text"
    )
    one_line_error(nw_jobs("pipeline", "show", "pl-none", *where), "no pipeline pl-none")
    assert jobs.list_jobs(project) == []
