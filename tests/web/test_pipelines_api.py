"""Pipelines through the JSON API: POST /api/pipelines (202, a resubmission
200), a bad step refused 400 naming it with nothing written, over budget 402,
GET one (and by one of its jobs), cancel, and estimate."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("starlette")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw import jobs
from nw.jobs.web import create_app
from tests.fixtures import pipeline_bodies

STEPS = {
    "board": {"kind": "p.step", "params": {"name": "board", "estimated_usd": 0.25}},
    "panel": {
        "kind": "p.step",
        "params": {"name": "panel", "estimated_usd": 0.5},
        "after": ["board"],
    },
}


@pytest.fixture
def client(project):
    pipeline_bodies.register_all()
    return TestClient(create_app([project], stream_max_s=1.0, poll_interval_s=0.05))


def test_post_get_cancel_a_pipeline(project, client):
    made = client.post("/api/pipelines", json={"steps": STEPS, "label": "film"})
    assert made.status_code == 202, made.text
    body = made.json()
    assert body["label"] == "film" and body["quote"]["estimated_usd"] == 0.75
    assert [s["name"] for s in body["steps"]] == ["board", "panel"]
    assert body["steps"][1]["job"]["waiting"] == "waiting: after board"
    pid = body["pipeline_id"]
    again = client.post("/api/pipelines", json={"steps": STEPS})
    assert again.status_code == 200 and again.json()["pipeline_id"] == pid
    got = client.get(f"/api/pipelines/{pid}")
    assert got.status_code == 200 and got.json()["status"] == "queued"
    job_id = body["steps"][1]["job"]["job_id"]
    by_job = client.get("/api/pipelines", params={"job": job_id})
    assert by_job.status_code == 200 and by_job.json()["pipeline_id"] == pid
    assert client.get(f"/api/jobs/{job_id}").json()["pipeline_id"] == pid
    cancelled = client.post(f"/api/pipelines/{pid}/cancel", json={})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert client.get("/api/pipelines/pl-nope").status_code == 404


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"steps": {"a": {"kind": "p.step", "after": ["a"]}}}, "cycle"),
        ({"steps": {"a": {"kind": "nope"}}}, "step 'a'"),
        ({"steps": []}, "'steps'"),
        ({"steps": STEPS, "extra": 1}, "unknown field"),
        ({"steps": {"a": {"kind": "p.step", "label": "<b>\u202e</b>"}}}, "step 'a'"),
        ({"steps": {"a\u0000b": {"kind": "p.step"}}}, "step name"),
        ({"steps": {"a": {"kind": "p.step", "after": ["\u001b[2J"]}}}, "unknown step"),
    ],
)
def test_a_bad_pipeline_is_a_400_naming_it_and_writes_nothing(project, client, body, words):
    got = client.post("/api/pipelines", json=body)
    assert got.status_code == 400, got.text
    assert words in got.json()["error"] and "\n" not in got.json()["error"]
    assert jobs.list_jobs(project) == []


def test_over_budget_is_a_402_and_estimate_answers_without_writing(project, client):
    quoted = client.post("/api/pipelines/estimate", json={"steps": STEPS})
    assert quoted.status_code == 200 and quoted.json()["estimated_usd"] == 0.75
    jobs.set_budget(project, 0.5)
    over = client.post("/api/pipelines", json={"steps": STEPS})
    assert over.status_code == 402
    assert jobs.list_jobs(project) == []
