"""The JSON API through an ASGI test client: every route, bad ids, auth, body limits."""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.applications import Starlette
from starlette.routing import Mount

with warnings.catch_warnings():  # newer Starlette nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

import nw
from nw import errors as nw_errors
from nw.jobs import JobRefused, enqueue, get_job
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.web import create_app
from tests.helpers import wait_until

JSON = {"content-type": "application/json"}  # what a POST must say it sends

NO_SUCH_JOB = "0" * 64


# ----- bodies -------------------------------------------------------------------------
def quick(project, params, *, on_event):
    on_event({"stage_index": 0, "stage_count": 2, "current_transform": "draw"})
    on_event({"stage_index": 2, "stage_count": 2, "current_transform": "done"})
    return {"cost_usd_actual": 0.02, "has_unknown_costs": False}


def stepped(project, params, *, on_event):
    for i in range(4):
        on_event({"stage_index": i, "stage_count": 4, "current_transform": f"s{i}"})
        time.sleep(0.05)
    return {"ok": True}


def refuses(project, params):
    raise JobRefused("no voice cast")


def registered_body(project, params):  # run by a worker; never here
    return {"ok": True}


def _finished(project, job):
    return wait_until(
        lambda: (j := get_job(project, job.job_id)) is not None and j.is_terminal and j,
        what=f"job {job.job_id[:8]} to finish",
    )


@pytest.fixture
def client(project):
    return TestClient(create_app([project], stream_max_s=1.0, poll_interval_s=0.05))


@pytest.fixture
def done_job(project):
    job = enqueue(project, "quick", {"n": 1}, dispatch={"quick": quick})
    return _finished(project, job)


@pytest.fixture
def registered_kind():
    register_kind("test.remote", "tests.web.test_api:registered_body")
    yield "test.remote"
    unregister_kind("test.remote")


def _events(text: str) -> list[tuple[str, dict]]:
    """(event name, data) for each SSE message in a stream's text."""
    out = []
    for block in text.split("\n\n"):
        name, data = "message", None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
        if data is not None:
            out.append((name, data))
    return out


# ----- GET /api/jobs ----------------------------------------------------------------------
def test_list_is_empty_for_a_project_that_never_ran_a_job(client):
    # Given a fresh project / When listing / Then no jobs and nothing broke
    response = client.get("/api/jobs")
    assert response.status_code == 200
    assert response.json() == {"jobs": [], "next": None}


def test_list_shows_jobs_with_their_project_and_filters(client, project, done_job):
    response = client.get("/api/jobs")
    jobs = response.json()["jobs"]
    assert [j["job_id"] for j in jobs] == [done_job.job_id]
    assert jobs[0]["project"] == str(project.root)
    assert jobs[0]["status"] == "succeeded"
    assert client.get("/api/jobs?status=queued").json() == {"jobs": [], "next": None}
    assert len(client.get("/api/jobs?status=succeeded&limit=1").json()["jobs"]) == 1
    assert client.get(f"/api/jobs?project={project.root.name}").json()["jobs"]


@pytest.mark.parametrize(
    "query, fragment",
    [
        ("status=bogus", "unknown status"),
        ("limit=zero", "limit must be a whole number"),
        ("limit=0", "limit must be from 1"),
    ],
)
def test_list_rejects_bad_queries_with_a_json_error(client, query, fragment):
    response = client.get(f"/api/jobs?{query}")
    assert response.status_code == 400
    assert fragment in response.json()["error"]


def test_list_of_an_unknown_project_is_404(client):
    response = client.get("/api/jobs?project=elsewhere")
    assert response.status_code == 404
    assert "elsewhere" in response.json()["error"]


# ----- GET /api/jobs/{id} -------------------------------------------------------------------
def test_get_returns_the_to_dict_contract(client, done_job):
    response = client.get(f"/api/jobs/{done_job.job_id}")
    assert response.status_code == 200
    body = response.json()
    assert body["job_id"] == done_job.job_id
    assert body["cost"]["actual_usd"] == 0.02
    assert body["cost"]["actual_is_lower_bound"] is False
    assert body["grade"] == "ok"


@pytest.mark.parametrize("bad", ["xyz", "../../etc/passwd", "A" * 64, "0" * 63])
def test_bad_ids_are_400_on_every_id_route(client, bad):
    for method, path in [
        ("GET", f"/api/jobs/{bad}"),
        ("POST", f"/api/jobs/{bad}/cancel"),
        ("GET", f"/api/jobs/{bad}/events"),
    ]:
        response = client.request(method, path, headers=JSON)
        if response.status_code == 404:  # a path-like id never reaches the route
            assert "/" in bad and "error" in response.json()
            continue
        assert response.status_code == 400, (method, path)
        assert "not a job id" in response.json()["error"]


def test_unknown_ids_are_404_on_every_id_route(client):
    for method, path in [
        ("GET", f"/api/jobs/{NO_SUCH_JOB}"),
        ("POST", f"/api/jobs/{NO_SUCH_JOB}/cancel"),
        ("GET", f"/api/jobs/{NO_SUCH_JOB}/events"),
    ]:
        response = client.request(method, path, headers=JSON)
        assert response.status_code == 404, (method, path)
        assert response.json() == {"error": f"no job {NO_SUCH_JOB}"}


# ----- POST /api/jobs/{id}/cancel ----------------------------------------------------------
def test_cancel_stops_a_running_job(client, project, gate):
    job = enqueue(project, "held", {}, dispatch={"held": gate})
    assert gate.started.wait(5)
    response = client.post(f"/api/jobs/{job.job_id}/cancel", headers=JSON)
    assert response.status_code == 200
    assert response.json()["status"] in ("cancelling", "cancelled")
    final = _finished(project, job)
    assert final.status == "cancelled"
    assert client.get(f"/api/jobs/{job.job_id}").json()["grade"] == "notice"


def test_cancel_of_a_finished_job_leaves_it_alone(client, done_job):
    response = client.post(f"/api/jobs/{done_job.job_id}/cancel", headers=JSON)
    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"


# ----- GET /api/estimate -------------------------------------------------------------------
def test_estimate_quotes_without_writing(client, project, registered_kind):
    params = json.dumps({"estimated_usd": 0.5})
    response = client.get("/api/estimate", params={"kind": registered_kind, "params": params})
    assert response.status_code == 200
    body = response.json()
    assert body["estimated_usd"] == 0.5
    assert body["requires_approval"] is False
    assert not (project.root / ".nw" / "jobs").exists()


@pytest.mark.parametrize(
    "query, fragment",
    [
        ({"params": "{}"}, "kind is required"),
        ({"kind": "k", "params": "{nope"}, "params is not valid JSON"),
        ({"kind": "k", "params": "[1]"}, "params must be a JSON object"),
        ({"kind": "k", "params": '{"units": 0}'}, "units"),
    ],
)
def test_estimate_rejects_bad_input(client, query, fragment):
    response = client.get("/api/estimate", params=query)
    assert response.status_code == 400
    assert fragment in response.json()["error"]


# ----- POST /api/jobs ------------------------------------------------------------------------
def test_post_enqueues_a_registered_kind_once(client, registered_kind):
    body = {"kind": registered_kind, "params": {"x": 1}, "idempotency_key": "k1"}
    first = client.post("/api/jobs", json=body)
    assert first.status_code == 202
    assert first.json()["status"] == "queued"
    again = client.post("/api/jobs", json=body)
    assert again.json()["job_id"] == first.json()["job_id"]
    listed = client.get("/api/jobs?status=queued").json()["jobs"]
    assert [j["job_id"] for j in listed] == [first.json()["job_id"]]


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b'{"kind": "nope"}', "not registered"),
        (b"{not json", "the body is not valid JSON"),
        (b'"a string"', "must be a JSON object"),
        (b'{"params": {}}', "'kind' is required"),
        (b'{"kind": "test.remote", "params": [1]}', "'params' must be a JSON object"),
        (b'{"kind": "test.remote", "approved": "yes"}', "'approved' must be true or false"),
        (b'{"kind": "test.remote", "params": {"units": -1}}', "units"),
    ],
)
def test_post_rejects_what_it_cannot_run(client, registered_kind, body, fragment):
    response = client.post("/api/jobs", content=body, headers=JSON)
    assert response.status_code == 400
    assert fragment in response.json()["error"]


def test_post_a_list_enqueues_a_batch_in_order(client, registered_kind):
    items = [
        {"kind": registered_kind, "params": {"x": 1}},
        {"kind": registered_kind, "params": {"x": 2}, "label": "two", "actor": "ana"},
        {"kind": registered_kind, "params": {"x": 1}},  # the same job as the first
    ]
    response = client.post("/api/jobs", json=items)
    assert response.status_code == 202
    got = response.json()["jobs"]
    assert [j["params"] for j in got] == [{"x": 1}, {"x": 2}, {"x": 1}]
    assert got[0]["job_id"] == got[2]["job_id"] and got[1]["label"] == "two"
    listed = client.get("/api/jobs?status=queued").json()["jobs"]
    assert sorted(j["job_id"] for j in listed) == sorted({j["job_id"] for j in got})
    assert client.post("/api/jobs", json=[]).json() == {"jobs": []}


@pytest.mark.parametrize(
    "second, fragment",
    [
        ({"kind": "nope"}, "item 1: kind 'nope' is not registered"),
        ({"params": {}}, "item 1: 'kind' is required"),
        ([1], "item 1: must be a JSON object"),
        ({"kind": "test.remote", "project": "p"}, "item 1: unknown field(s) project"),
        ({"kind": "test.remote", "params": {"units": -1}}, "item 1: "),
    ],
)
def test_post_a_list_with_one_bad_item_writes_nothing(client, registered_kind, second, fragment):
    items = [{"kind": registered_kind, "params": {"x": 1}}, second]
    response = client.post("/api/jobs", json=items)
    assert response.status_code == 400
    assert response.json()["error"].startswith(fragment)
    assert client.get("/api/jobs").json()["jobs"] == []


def test_the_cost_gate_refuses_with_402_and_writes_nothing(project, registered_kind):
    from nw.jobs import JobsConfig

    client = TestClient(create_app([project], config=JobsConfig(budget_usd=0.5)))
    over = {"kind": registered_kind, "params": {"estimated_usd": 2.0}}
    response = client.post("/api/jobs", json=over)
    assert response.status_code == 402
    assert "spend cap $0.50" in response.json()["error"]
    assert response.json()["needs_approval"] is False
    unknown = client.post("/api/jobs", json={"kind": registered_kind, "params": {}})
    assert unknown.status_code == 402 and unknown.json()["needs_approval"] is True
    assert client.get("/api/jobs").json() == {"jobs": [], "next": None}
    approved = {"kind": registered_kind, "params": {}, "approved": True}
    assert client.post("/api/jobs", json=approved).status_code == 202


def test_oversized_bodies_are_413_declared_or_streamed(project, registered_kind):
    client = TestClient(create_app([project], max_body_bytes=1024))
    big = json.dumps({"kind": registered_kind, "params": {"pad": "x" * 5000}}).encode()
    declared = client.post("/api/jobs", content=big, headers=JSON)
    assert declared.status_code == 413
    assert "larger than 1024 bytes" in declared.json()["error"]

    def chunks():  # no Content-Length: the limit must hold while reading
        for i in range(0, len(big), 500):
            yield big[i : i + 500]

    streamed = client.post("/api/jobs", content=chunks(), headers=JSON)
    assert streamed.status_code == 413
    small = client.post("/api/jobs", json={"kind": registered_kind, "params": {}})
    assert small.status_code == 202


# ----- GET /api/jobs/{id}/events -------------------------------------------------------------
def test_job_events_stream_until_the_job_ends(client, project):
    job = enqueue(project, "stepped", {}, dispatch={"stepped": stepped})
    with client.stream("GET", f"/api/jobs/{job.job_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response.read().decode())
    updates = [data for name, data in events if name == "message"]
    assert updates and all(u["job_id"] == job.job_id for u in updates)
    assert updates[-1]["status"] == "succeeded"
    assert events[-1] == ("end", {"status": "succeeded"})


def test_job_events_of_a_finished_job_send_it_once_and_end(client, done_job):
    with client.stream("GET", f"/api/jobs/{done_job.job_id}/events") as response:
        events = _events(response.read().decode())
    assert [name for name, _ in events] == ["message", "end"]


# ----- GET /api/summary (+ events) -----------------------------------------------------------
def test_summary_spans_projects(tmp_path):
    # Given two projects, each with one finished job
    a = nw.Project.init(tmp_path / "a")
    b = nw.Project.init(tmp_path / "b")
    jobs = [enqueue(p, "quick", {"p": str(p.root)}, dispatch={"quick": quick}) for p in (a, b)]
    for p, job in zip((a, b), jobs, strict=True):
        _finished(p, job)
    client = TestClient(create_app([a, b]))
    # When the summary is read / Then both show in the recent feed with their projects
    body = client.get("/api/summary").json()
    assert {r["project"] for r in body["recent"]} == {str(a.root), str(b.root)}
    assert body["active"] == [] and body["active_count"] == 0
    assert [p["name"] for p in body["projects"]] == ["a", "b"]
    assert len(client.get("/api/jobs").json()["jobs"]) == 2
    assert client.get("/api/jobs?project=b").json()["jobs"][0]["project"] == str(b.root)
    # And a create without a project is ambiguous
    response = client.post("/api/jobs", json={"kind": "quick"})
    assert response.status_code == 400


def test_summary_events_stream_snapshots(client, done_job):
    with client.stream("GET", "/api/summary/events") as response:
        events = _events(response.read().decode())
    snapshots = [data for name, data in events if name == "message"]
    assert snapshots
    assert snapshots[0]["recent"][0]["job_id"] == done_job.job_id


def test_refused_job_reads_as_a_warning(client, project):
    job = _finished(project, enqueue(project, "refuses", {}, dispatch={"refuses": refuses}))
    body = client.get(f"/api/jobs/{job.job_id}").json()
    assert (body["status"], body["grade"], body["error"]) == ("failed", "warning", "no voice cast")


# ----- auth -------------------------------------------------------------------------------------
def test_without_a_token_every_route_is_open(client):
    assert client.get("/api/summary").status_code == 200
    assert client.get("/").status_code == 200


def test_a_token_guards_every_route(project, done_job):
    client = TestClient(create_app([project], token="s3cret", stream_max_s=0.2))
    paths = [
        "/",
        "/static/tray.js",
        "/api/jobs",
        f"/api/jobs/{done_job.job_id}",
        f"/api/jobs/{done_job.job_id}/events",
        "/api/summary",
        "/api/summary/events",
        "/api/estimate?kind=k",
        "/nowhere",
    ]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.json() == {"error": "missing or wrong bearer token"}
        assert response.headers["www-authenticate"].startswith("Bearer")
        wrong = client.get(path, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401, path
    assert client.post(f"/api/jobs/{done_job.job_id}/cancel", headers=JSON).status_code == 401
    good = {"authorization": "Bearer s3cret"}
    assert client.get("/api/jobs", headers=good).status_code == 200
    assert client.get(f"/api/jobs/{done_job.job_id}", headers=good).status_code == 200


def test_the_tray_trades_a_token_in_the_url_for_a_strict_cookie(project):
    client = TestClient(create_app([project], token="s3cret"))
    response = client.get("/?token=s3cret", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    # The client keeps the cookie: the page and the event stream now open
    assert client.get("/").status_code == 200
    assert client.get("/api/summary").status_code == 200
    forged = TestClient(create_app([project], token="s3cret"), cookies={"nw_jobs_token": "no"})
    assert forged.get("/api/summary").status_code == 401
    assert forged.get("/?token=wrong").status_code == 401


# ----- errors are JSON, never a stack trace ---------------------------------------------------
def test_unknown_routes_and_methods_answer_json(client):
    assert client.get("/api/nothing").json() == {"error": "Not Found"}
    response = client.delete("/api/jobs", headers=JSON)
    assert response.status_code == 405
    assert "error" in response.json()


def test_an_internal_error_is_a_bare_500(project, monkeypatch):
    from nw.jobs.api import facade

    def boom(*args, **kwargs):
        raise RuntimeError("secret internals at /srv/app.py line 12")

    monkeypatch.setattr(facade, "list_jobs", boom)
    client = TestClient(create_app([project]), raise_server_exceptions=False)
    response = client.get("/api/jobs")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error; see the server log"}
    assert "secret" not in response.text


@pytest.mark.parametrize(
    "raised",
    [KeyError("k"), ValueError("v"), TypeError("t"), AttributeError("a")],
    ids=lambda e: type(e).__name__,
)
def test_a_builtin_error_from_inside_is_a_500_never_a_400(project, monkeypatch, raised):
    # Given a bug deep inside that happens to raise what bad input used to raise
    from nw.jobs.api import facade

    def bug(*args, **kwargs):
        raise raised

    monkeypatch.setattr(facade, "list_jobs", bug)
    client = TestClient(create_app([project]), raise_server_exceptions=False)
    # When a well-formed request meets it, then the server owns the fault
    response = client.get("/api/jobs")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error; see the server log"}


@pytest.mark.parametrize(
    ("raised", "status", "shown"),
    [
        (nw_errors.InvalidValue("limit is wrong"), 400, "limit is wrong"),
        (nw_errors.UnknownKind("unknown kind 'x'"), 400, "unknown kind 'x'"),
        (nw_errors.NonCanonicalPlan("plan.calls[0]", "set"), 400, "no canonical form"),
        (nw_errors.JobStoreError("job store gone"), 503, "job store is unavailable"),
        (nw_errors.RateTableError("rates.json at /srv"), 500, "misconfigured"),
        (nw_errors.JobRefused("a body's signal, leaked"), 500, "internal error"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_error_type_has_its_status(project, monkeypatch, raised, status, shown):
    from nw.jobs.api import facade

    def fails(*args, **kwargs):
        raise raised

    monkeypatch.setattr(facade, "list_jobs", fails)
    client = TestClient(create_app([project]), raise_server_exceptions=False)
    response = client.get("/api/jobs")
    assert (response.status_code, list(response.json())) == (status, ["error"])
    assert shown in response.json()["error"]
    if status == 500:  # the operator's detail stays in the server's log
        assert "/srv" not in response.text and "leaked" not in response.text


def test_a_failing_store_answers_503_naming_it(project, cfg, monkeypatch):
    # Given a store that cannot be read: a corrupt file, or a database nobody answers on
    if cfg.database_url:
        monkeypatch.setenv("NW_JOBS_PG_RETRY_S", "0.5")
        gone = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1"
        cfg = dataclasses.replace(cfg, database_url=gone)
    else:
        store_file = Path(project.root) / ".nw/jobs/jobs.sqlite3"
        store_file.parent.mkdir(parents=True, exist_ok=True)
        store_file.write_bytes(b"this is not a database" * 100)
    client = TestClient(create_app([project], config=cfg))
    try:
        # Then every read says the store failed: a 503, not the caller's fault nor a bare 500
        for path in ("/api/jobs", f"/api/jobs/{NO_SUCH_JOB}", "/api/summary"):
            response = client.get(path)
            assert response.status_code == 503, (path, response.text)
            assert "job store" in response.json()["error"]
    finally:
        if cfg.database_url:  # the pool for the dead address would retry for ever
            from nw.jobs.stores.postgres import close_pools

            close_pools()


# ----- the page, mounted ------------------------------------------------------------------------
def test_the_app_mounts_under_a_prefix(project, done_job):
    outer = Starlette(routes=[Mount("/jobs", app=create_app([project]))])
    client = TestClient(outer)
    page = client.get("/jobs/")
    assert page.status_code == 200
    assert '<base href="/jobs/">' in page.text
    assert client.get("/jobs/static/tray.js").status_code == 200
    assert client.get("/jobs/static/tray.css").status_code == 200
    assert client.get("/jobs/api/jobs").json()["jobs"][0]["job_id"] == done_job.job_id


def test_create_app_refuses_bad_settings(project):
    with pytest.raises(ValueError):
        create_app([project], token="")
    with pytest.raises(ValueError):
        create_app([project], max_body_bytes=0)
    with pytest.raises(nw.ProjectError):
        create_app([])


def test_a_host_guard_refuses_foreign_host_names(project):
    from nw.jobs.web.app import LOOPBACK_HOSTS

    app = create_app([project], allowed_hosts=LOOPBACK_HOSTS)
    assert TestClient(app, base_url="http://127.0.0.1:8765").get("/api/jobs").status_code == 200
    assert TestClient(app, base_url="http://localhost").get("/api/jobs").status_code == 200
    rebound = TestClient(app, base_url="http://evil.example:8765").get("/api/jobs")
    assert rebound.status_code == 400
    assert rebound.json() == {"error": "this server does not answer to that Host"}
