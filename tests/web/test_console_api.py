"""The console's routes (CONSOLE_API.md) through an ASGI test client, on both stores:
history pages and filters, a job's trail, retry (one and in bulk), totals,
workers and the Prometheus metrics."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

pytest.importorskip("starlette")
pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw.jobs import enqueue, get_job
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.web import create_app
from tests.helpers import wait_until

JSON = {"content-type": "application/json"}  # what a POST must say it sends

KIND = "test.console"
OTHER = "test.console.other"


def staged(project, params, *, on_event):
    on_event({"stage_index": 0, "stage_count": 2, "current_transform": "draw"})
    on_event({"stage_index": 1, "stage_count": 2, "current_transform": "ink"})
    return {"cost_usd_actual": float(params.get("spent", 0.1)), "has_unknown_costs": False}


def boom(project, params):
    raise RuntimeError("the renderer fell over")


@pytest.fixture
def kinds_registered():
    register_kind(KIND, "tests.web.test_console_api:boom")
    register_kind(OTHER, "tests.web.test_console_api:boom")
    yield
    unregister_kind(KIND)
    unregister_kind(OTHER)


def _client(project, cfg, **kw):
    return TestClient(create_app([project], config=cfg, stream_max_s=1.0, **kw))


def _finish(project, job, cfg):
    return wait_until(
        lambda: (j := get_job(project, job.job_id, config=cfg)) is not None and j.is_terminal and j,
        what=f"job {job.job_id[:8]} to finish",
    )


def _run(project, cfg, kind, fn, n, **kw):
    jobs = [
        enqueue(
            project, kind, {"n": i, "title": f"Panel {i}"}, dispatch={kind: fn}, config=cfg, **kw
        )
        for i in range(n)
    ]
    return [_finish(project, job, cfg) for job in jobs]


# ----- GET /api/jobs: pages and filters ------------------------------------------------
def test_pages_walk_the_whole_history_newest_first_without_a_gap(project, cfg):
    done = _run(project, cfg, "paint", staged, 7)
    client = _client(project, cfg)
    seen, before, pages = [], None, 0
    while True:
        query = "limit=3" + (f"&before={before}" if before else "")
        body = client.get(f"/api/jobs?{query}").json()
        seen += [j["job_id"] for j in body["jobs"]]
        pages += 1
        before = body["next"]
        if before is None:
            break
        assert before == body["jobs"][-1]["job_id"]
    assert pages == 3
    newest_first = [j.job_id for j in sorted(done, key=lambda j: (j.created_at, j.job_id))][::-1]
    assert seen == newest_first


def test_filters_by_kind_status_grade_actor_and_label_text(project, cfg, kinds_registered):
    _run(project, cfg, "paint", staged, 2, actor="ann")
    failed = _run(project, cfg, KIND, boom, 1, actor="bob")[0]
    client = _client(project, cfg)

    def ids(query):
        response = client.get(f"/api/jobs?{query}")
        assert response.status_code == 200, response.text
        return [j["job_id"] for j in response.json()["jobs"]]

    assert ids(f"kind={KIND}") == [failed.job_id]
    assert ids("status=failed") == [failed.job_id]
    assert ids("grade=error") == [failed.job_id]
    assert len(ids("grade=ok")) == 2
    assert ids("actor=bob") == [failed.job_id]
    assert len(ids("actor=ann&status=succeeded")) == 2
    assert [j["label"] for j in client.get("/api/jobs?q=pANEL 1").json()["jobs"]] == ["Panel 1"]
    assert ids("q=nothing like it") == []


@pytest.mark.parametrize(
    "query, fragment",
    [
        ("grade=bad", "unknown grade"),
        ("before=xyz", "before must be a job id"),
        ("before=" + "a" * 64, "no job"),
    ],
)
def test_a_bad_filter_or_cursor_is_a_400_naming_it(project, cfg, query, fragment):
    _run(project, cfg, "paint", staged, 1)
    response = _client(project, cfg).get(f"/api/jobs?{query}")
    assert response.status_code == 400
    assert fragment in response.json()["error"]


def test_a_job_reads_with_its_attempts(project, cfg, kinds_registered):
    failed = _run(project, cfg, KIND, boom, 1)[0]
    data = _client(project, cfg).get(f"/api/jobs/{failed.job_id}").json()
    (attempt,) = data["attempts"]
    assert attempt["attempt"] == 1 and attempt["ended"] == "failed"
    assert "the renderer fell over" in attempt["error"]
    assert attempt["host"] and isinstance(attempt["pid"], int) and attempt["runner_id"]
    assert attempt["started_at"] <= attempt["ended_at"]


# ----- GET /api/jobs/{id}/progress ------------------------------------------------------
def test_progress_is_the_trail_with_stage_names_oldest_first(project, cfg):
    job = _run(project, cfg, "paint", staged, 1)[0]
    client = _client(project, cfg)
    trail = client.get(f"/api/jobs/{job.job_id}/progress").json()["progress"]
    names = [(beat.get("stage") or {}).get("current_transform") for beat in trail]
    assert names[:2] == ["draw", "ink"]
    assert [b["ts"] for b in trail] == sorted(b["ts"] for b in trail)
    assert len(client.get(f"/api/jobs/{job.job_id}/progress?limit=1").json()["progress"]) == 1
    assert client.get(f"/api/jobs/{'0' * 64}/progress").status_code == 404


# ----- POST /api/jobs/{id}/retry -----------------------------------------------------
def test_retry_runs_a_failed_job_again_under_the_same_id(project, cfg, kinds_registered):
    failed = _run(project, cfg, KIND, boom, 1)[0]
    client = _client(project, cfg)
    response = client.post(f"/api/jobs/{failed.job_id}/retry", headers=JSON)
    assert response.status_code == 202, response.text
    data = response.json()
    assert data["job_id"] == failed.job_id and data["status"] == "queued"
    assert data["attempts"] == [] and data["error"] is None
    # a live job is not retried again; an unknown one is 404
    again = client.post(f"/api/jobs/{failed.job_id}/retry", headers=JSON)
    assert again.status_code == 400 and "only a failed or cancelled job" in again.json()["error"]
    assert client.post(f"/api/jobs/{'0' * 64}/retry", headers=JSON).status_code == 404
    assert (
        client.post(f"/api/jobs/{failed.job_id}/retry", content=b"[1]", headers=JSON).status_code
        == 400
    )


def test_a_succeeded_job_is_not_retried(project, cfg):
    done = _run(project, cfg, "paint", staged, 1)[0]
    response = _client(project, cfg).post(f"/api/jobs/{done.job_id}/retry", headers=JSON)
    assert response.status_code == 400 and "succeeded" in response.json()["error"]


def test_retry_goes_through_the_cost_gate(project, cfg, kinds_registered):
    params = {"estimated_usd": 0.4}
    job = enqueue(project, KIND, params, dispatch={KIND: boom}, config=cfg)
    failed = _finish(project, job, cfg)
    capped = dataclasses.replace(cfg, budget_usd=0.1)
    client = _client(project, capped)
    response = client.post(f"/api/jobs/{failed.job_id}/retry", json={"approved": True})
    assert response.status_code == 402
    assert "spend cap $0.10" in response.json()["error"]
    assert get_job(project, failed.job_id, config=cfg).status == "failed"  # nothing written


def test_bulk_retry_takes_the_failed_jobs_of_a_kind(project, cfg, kinds_registered):
    mine = _run(project, cfg, KIND, boom, 2)
    other = _run(project, cfg, OTHER, boom, 1)[0]
    client = _client(project, cfg)
    response = client.post("/api/jobs/retry", json={"kind": KIND, "since": "2000-01-01T00:00Z"})
    assert response.status_code == 202, response.text
    assert sorted(j["job_id"] for j in response.json()["jobs"]) == sorted(j.job_id for j in mine)
    assert get_job(project, other.job_id, config=cfg).status == "failed"
    future = client.post("/api/jobs/retry", json={"since": 4102444800})  # 2100: none since
    assert future.status_code == 202 and future.json() == {"jobs": []}
    for body, fragment in [
        ({"status": "succeeded"}, "status must be one of"),
        ({"since": "yesterday"}, "not an ISO 8601 time"),
        ({"since": "2026-01-01T00:00:00"}, "needs a time zone"),
        ({"approved": "yes"}, "'approved' must be true or false"),
    ]:
        bad = client.post("/api/jobs/retry", json=body)
        assert bad.status_code == 400 and fragment in bad.json()["error"], body


# ----- GET /api/totals, /api/workers ---------------------------------------------------
def test_totals_sum_today_by_kind_and_actor_and_count_by_status_and_grade(
    project, cfg, kinds_registered
):
    _run(project, cfg, "paint", staged, 2, actor="ann")
    _run(project, cfg, KIND, boom, 1, actor="bob")
    data = _client(project, cfg).get("/api/totals").json()
    today = data["spend"]["today"]
    assert today["usd"] == pytest.approx(0.2)
    assert today["by_kind"]["paint"] == pytest.approx(0.2)
    assert today["by_actor"] == {"ann": pytest.approx(0.2), "bob": 0.0}
    assert data["spend"]["week"]["usd"] == pytest.approx(0.2)
    assert data["counts"]["by_status"] == {"succeeded": 2, "failed": 1}
    assert data["counts"]["by_grade"] == {"ok": 2, "error": 1}
    assert data["project"] == str(project.root)


def test_workers_lists_the_process_running_bodies(project, cfg):
    _run(project, cfg, "paint", staged, 1)
    (worker,) = _client(project, cfg).get("/api/workers").json()["workers"]
    assert worker["state"] == "live" and worker["role"] == "inproc"
    assert worker["slots"] == cfg.max_concurrent and worker["busy"] == 0
    assert isinstance(worker["pid"], int) and worker["host"]
    assert worker["started_at"] <= worker["last_beat_at"]


# ----- GET /metrics ----------------------------------------------------------------
def test_metrics_are_prometheus_text_behind_the_token(project, cfg, kinds_registered):
    _run(project, cfg, "paint", staged, 2)
    _run(project, cfg, KIND, boom, 1)
    client = _client(project, cfg, token="s3cret")
    assert client.get("/metrics").status_code == 401
    response = client.get("/metrics", headers={"authorization": "Bearer s3cret"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    root = str(project.root)
    samples = [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    ]

    def value(name: str, **labels: str) -> float:
        found = [v for n, got, v in samples if n == name and got == {"project": root, **labels}]
        assert len(found) == 1, f"{name} {labels} in {samples}"
        return found[0]

    assert value("nw_jobs_finished", status="succeeded", grade="ok") == 2
    assert value("nw_jobs_finished", status="failed", grade="error") == 1
    assert value("nw_jobs_job_duration_seconds_count", kind="paint") == 2
    assert value("nw_jobs_job_duration_seconds_bucket", kind="paint", le="+Inf") == 2
    assert value("nw_jobs_spend_usd", window="today") == pytest.approx(0.2)
    assert value("nw_jobs_workers", state="live") == 1
    assert "# TYPE nw_jobs_queued gauge" in response.text
