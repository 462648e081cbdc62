"""The documentation's examples (``docs/examples/``), run as the pages run them.

The tutorial and the how-to pages include these files verbatim, so a change
of the API that breaks a page breaks a test here: each script runs in a
fresh folder as ``python SCRIPT``, against a real ``nw-jobs worker`` where
the page starts one, on the embedded store and on PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nw
from nw.jobs import JobsConfig, set_limit
from nw.jobs.core.kinds import unregister_kind
from tests.conftest import BACKENDS, purge_postgres_project, require_postgres
from tests.integration.workers import stop

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
NW_JOBS = str(Path(sys.executable).with_name("nw-jobs"))  # the console script, as documented

pytestmark = pytest.mark.slow


@pytest.fixture
def film(tmp_path):
    """The tutorial's folder: the example scripts beside each other."""
    for path in EXAMPLES.glob("*.py"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def _env(database_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NW_JOBS_DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT)
    if database_url:
        env["NW_JOBS_DATABASE_URL"] = database_url
    return env


def run(script: str, cwd: Path, env: dict[str, str]) -> list[str]:
    """``python SCRIPT`` in ``cwd``; its output lines (a failure shows its stderr)."""
    done = subprocess.run(
        [sys.executable, script], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stderr}"
    return done.stdout.splitlines()


def worker(cwd: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [NW_JOBS, "worker", "--project", "my-film", "--import", "renders", *extra],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_first_job_and_cancel(film):
    """Tutorial steps 1 and 2: an in-process job to its end, then a cancel mid-run."""
    env = _env()
    first = run("first_job.py", film, env)
    assert "'estimated_usd': 0.02" in first[0] and "'requires_approval': False" in first[0]
    assert first[-1].startswith("succeeded ok 0.02 ['dawn, wide shot, ink and wash'")
    cancelled = run("cancel.py", film, env)
    assert cancelled[-1].startswith("cancelled cancelled cancelled on request; stopped before ")


@pytest.fixture(params=BACKENDS)
def database_url(request, film):
    """None (the embedded store), then the PostgreSQL test database."""
    if request.param == "sqlite":
        yield None
        return
    url = require_postgres()
    yield url
    project = nw.Project(film / "my-film")
    set_limit(project, "fal:kling", config=JobsConfig(database_url=url))  # database-wide
    purge_postgres_project(project)


def test_pipeline_on_workers(film, database_url):
    """Tutorial steps 3 and 4: storyboard, panels, clips run by two workers."""
    nw.Project.init(film / "my-film", title="My film")
    env = _env(database_url)
    workers = [worker(film, env, "--max-concurrent", "4") for _ in range(2)]
    try:
        lines = run("pipeline.py", film, env)
    finally:
        for proc in workers:
            stop(proc)
    assert lines[:3] == [f"clip {n} succeeded vid/panel-{n}.mp4 0.35" for n in (1, 2, 3)]
    assert "'total_usd': 1.19" in lines[3] and "'is_lower_bound': False" in lines[3]
    scope = "database" if database_url else "project"
    limits = subprocess.run(
        [NW_JOBS, "limits", "--project", "my-film"], cwd=film, env=env, capture_output=True
    )
    assert limits.stdout.decode().strip() == f"fal:kling: running 0 of 2 ({scope})"


def test_limits_example(film):
    """The limits how-to: a key's cap holds the batch; the caps are listed."""
    nw.Project.init(film / "my-film", title="My film")
    env = _env()
    proc = worker(film, env)
    try:
        lines = run("limits.py", film, env)
    finally:
        stop(proc)
    assert any(line.startswith("in ten minutes queued    starts in") for line in lines)
    assert sum("waiting: fal:kling at 2 of 2" in line for line in lines) >= 4
    assert "{'key': 'fal:kling', 'max_running': 2, 'per_second': None, 'running': 2," in lines[-1]


def test_parked_example(film):
    """The parked jobs how-to: the job parks (running, waiting on acme), then a poll ends it."""
    lines = run("parked.py", film, _env())
    assert lines[0] == "running | waiting on acme"
    assert lines[-1] == "succeeded https://acme/heron.mp4 0.12"


def test_budgets_example(film):
    """The budgets how-to: an actor's cap and an unknown cost refuse, nothing written."""
    lines = run("budgets.py", film, _env())
    assert lines[1] == (
        "spend cap of actor 'ann' $0.50: $0.35 is committed (spent plus live estimates);"
        " this job's quote of $0.35 would take it past the cap"
    )
    assert lines[2].startswith("True spend cap $5.00: $0.35 is committed")
    assert "'live_estimated_usd': 0.35" in lines[3] and "'live_unknown_count': 1" in lines[3]


def test_starlette_app_example(film, monkeypatch, request):
    """The FastAPI how-to's Starlette shape: the jobs app mounted, thin routes, its lifespan."""
    from starlette.testclient import TestClient

    monkeypatch.chdir(film)
    monkeypatch.syspath_prepend(str(film))
    monkeypatch.setenv("NW_JOBS_TOKEN", "s3cret")
    monkeypatch.setenv("FILM_PROJECT", str(film / "app-film"))
    monkeypatch.delitem(sys.modules, "starlette_app", raising=False)
    monkeypatch.delitem(sys.modules, "renders", raising=False)
    import starlette_app

    for kind in ("film.storyboard", "film.panel", "film.animate"):  # renders.py's, for this test
        request.addfinalizer(lambda kind=kind: unregister_kind(kind))
    with TestClient(starlette_app.app) as client:
        made = client.post("/clips", json={"n": 1, "image": "img/panel-1.png"})
        assert made.status_code == 202 and made.json()["status"] == "queued"
        job_id = made.json()["job_id"]
        assert client.get(f"/clips/{job_id}").json()["job_id"] == job_id
        waited = client.get(f"/clips/{job_id}/done?timeout=0.2")  # no worker runs it here
        assert waited.status_code == 408 and "not done after 0.2 s" in waited.json()["error"]
        nw.jobs.cancel_job(film / "app-film", job_id)
        assert client.get(f"/clips/{job_id}/done").json()["status"] == "cancelled"
        assert client.get("/clips/" + "0" * 64).status_code == 404
        bad = client.post("/clips", json={"n": 2, "units": -1})
        assert bad.status_code == 400 and "units" in bad.json()["error"]
        assert client.get("/jobs/api/jobs").status_code == 401
        listed = client.get("/jobs/api/jobs", headers={"Authorization": "Bearer s3cret"})
        assert [job["job_id"] for job in listed.json()["jobs"]] == [job_id]


def test_film_pipeline_example(film, database_url):
    """The pipelines how-to: a whole film as one pipeline, quoted first, run by a worker."""
    nw.Project.init(film / "my-film", title="My film")
    env = _env(database_url)
    proc = worker(film, env, "--max-concurrent", "4")
    try:
        lines = run("film_pipeline.py", film, env)
    finally:
        stop(proc)
    assert lines[0] == "0.8 False"  # the whole quote, every step priced
    assert lines[1] == "True ['storyboard', 'panel1', 'panel2', 'clip1', 'clip2', 'cut']"
    assert lines[2] == "succeeded 100.0 0.8 ['vid/panel-1.mp4', 'vid/panel-2.mp4']"
    assert lines[3] == "True False"  # resubmitted: the same pipeline, nothing paid again
