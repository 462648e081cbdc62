"""A database URL without the postgres extra installed: every command says so
in one line naming ``pip install 'nw-jobs[postgres]'`` and exits non-zero (no
traceback), and the Python API raises ``ConfigError``.

The extra's absence is simulated, not uninstalled: a ``sitecustomize`` on the
child's path sets ``sys.modules["psycopg"] = None`` (and ``psycopg_pool``), so
``import psycopg`` fails there exactly as it does where it is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nw
from tests.helpers import REPO

pytestmark = pytest.mark.slow

URL = "postgresql://postgres@127.0.0.1:5432/nw_missing_extra"
HINT = "pip install 'nw-jobs[postgres]'"
SOME_ID = "abcd1234"

COMMANDS = [
    ["list"],
    ["list", "--json"],
    ["show", SOME_ID],
    ["watch", SOME_ID],
    ["cancel", SOME_ID],
    ["retry", SOME_ID],
    ["retry", "--failed"],
    ["spend"],
    ["summarize"],
    ["workers"],
    ["limits"],
    ["limits", "set", "fal:x", "--max-running", "1"],
    ["prune", "--older-than", "1d"],
    ["enqueue", "t.missing", "--import", "missing_extra_kinds"],
    ["worker", "--import", "missing_extra_kinds"],
    ["serve", "--port", "1"],  # refused before any port is bound
    ["db", "migrate"],
]


@pytest.fixture
def without_psycopg(tmp_path) -> dict[str, str]:
    """An environment whose Python cannot import psycopg, with the URL set."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.modules['psycopg'] = None\nsys.modules['psycopg_pool'] = None\n"
    )
    (site / "missing_extra_kinds.py").write_text(
        "from nw.jobs import register_kind\n"
        "register_kind('t.missing', 'missing_extra_kinds:body')\n"
        "def body(project, params):\n    return {}\n"
    )
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), REPO]),
        "NW_JOBS_DATABASE_URL": URL,
    }


@pytest.fixture
def folder(tmp_path) -> Path:
    project = nw.Project.init(tmp_path / "proj", title="missing extra")
    assert project.read_meta()["project_id"]  # a store would be looked for
    return Path(project.root)


def nw_jobs() -> list[str]:
    script = Path(sys.executable).with_name("nw-jobs")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nw.cli"]


def test_the_simulation_holds(without_psycopg):
    probe = subprocess.run(
        [sys.executable, "-c", "import psycopg"],
        env=without_psycopg,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_every_command_says_the_missing_extra_in_one_line(without_psycopg, folder, args):
    ran = subprocess.run(
        [*nw_jobs(), *args],
        cwd=folder,
        env=without_psycopg,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0, ran.stdout
    assert "Traceback" not in ran.stderr, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert HINT in lines[0], lines[0]


def test_the_python_api_raises_configerror(without_psycopg, folder):
    script = textwrap.dedent(
        f"""
        import nw.jobs as jobs
        from nw.errors import ConfigError
        project = {str(folder)!r}
        calls = {{
            "list_jobs": lambda: jobs.list_jobs(project),
            "get_job": lambda: jobs.get_job(project, "0" * 64),
            "spend": lambda: jobs.spend(project),
            "summarize": lambda: jobs.summarize(project),
            "enqueue": lambda: jobs.enqueue(project, "t", {{}}, dispatch={{"t": lambda p, q: 1}}),
        }}
        for name, call in calls.items():
            try:
                call()
            except ConfigError as exc:
                assert {HINT!r} in str(exc), str(exc)
                print(name, "ConfigError")
            else:
                raise SystemExit(name + " did not raise")
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", script],
        env=without_psycopg,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [
        word
        for name in ("list_jobs", "get_job", "spend", "summarize", "enqueue")
        for word in (name, "ConfigError")
    ]
