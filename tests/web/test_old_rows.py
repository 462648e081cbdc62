"""Rows stored before the door refused lone surrogates still read over HTTP.

The door (``nw/jobs/core/checks.py``) now refuses a lone surrogate, but a project
file written by an older release may hold one. Starlette's JSON answer
encodes to UTF-8, which cannot carry it: the page of jobs, the snapshot and
the job itself answered 500 for the whole project. Now such text is written
as its ``\\uXXXX`` escape and the answer stands.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from nw import jobs
from nw.jobs.execution.runtimes import shutdown_runtimes
from nw.jobs.stores import close_shared_stores
from tests.helpers import wait_until

pytest.importorskip("starlette")


def ok(project, params):
    return {"ok": True}


def test_a_stored_lone_surrogate_reads_as_its_escape_not_a_500(project):
    from starlette.testclient import TestClient

    from nw.jobs.web import create_app

    # Given a finished job, and then its label rewritten in the file with a
    # lone surrogate (as an older release could store it)
    job = jobs.enqueue(project, "ok", {"i": 1}, dispatch={"ok": ok})
    wait_until(lambda: jobs.get_job(project, job.job_id).is_terminal, what="the job to end")
    shutdown_runtimes(wait=True)
    close_shared_stores()
    path = Path(project.root) / ".nw/jobs/jobs.sqlite3"
    with sqlite3.connect(path) as conn:
        (doc,) = conn.execute("SELECT doc FROM jobs WHERE job_id = ?", (job.job_id,)).fetchone()
        record = {**json.loads(doc), "label": "bad \ud800 label"}
        conn.execute("UPDATE jobs SET doc = ? WHERE job_id = ?", (json.dumps(record), job.job_id))
    client = TestClient(create_app([project]))
    # Then the page, the snapshot and the job answer, the surrogate escaped
    for url in ("/api/jobs", "/api/summary", f"/api/jobs/{job.job_id}"):
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.text)
        assert "\\ud800" in answer.text, url
    (listed,) = client.get("/api/jobs").json()["jobs"]
    assert listed["label"] == "bad \ud800 label"
