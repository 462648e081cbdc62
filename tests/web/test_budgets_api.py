"""The spend policy through the JSON API: POST /api/jobs meets the stored
budgets and approval policy whatever the server's config, /api/estimate refuses
what the CLI refuses, /api/budgets and /metrics show each budget, and the
totals' "by actor" adds up."""

from __future__ import annotations

import json
import warnings

import pytest

pytest.importorskip("starlette")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw import jobs
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.web import create_app
from tests.helpers import wait_until


def registered_body(project, params):  # run by a worker; never here
    return {"ok": True}


def billed(project, params):
    return {"cost_usd_actual": params["bill"], "has_unknown_costs": False}


@pytest.fixture
def kind():
    register_kind("test.budgeted", "tests.web.test_budgets_api:registered_body")
    yield "test.budgeted"
    unregister_kind("test.budgeted")


@pytest.fixture
def client(project):
    return TestClient(create_app([project], stream_max_s=1.0, poll_interval_s=0.05))


def test_post_is_refused_past_a_stored_budget_and_names_it(project, client, kind):
    jobs.set_budget(project, 1.0, kind=kind, per="week")
    first = client.post("/api/jobs", json={"kind": kind, "params": {"estimated_usd": 0.6}})
    assert first.status_code == 202
    over = client.post("/api/jobs", json={"kind": kind, "params": {"estimated_usd": 0.6, "n": 2}})
    assert over.status_code == 402
    body = over.json()
    assert f"budget 'kind={kind}/week' $1.00" in body["error"] and "$0.60" in body["error"]
    assert body["needs_approval"] is False and body["budget"] == f"kind={kind}/week"
    batch = [{"kind": kind, "params": {"estimated_usd": 0.2, "n": n}} for n in range(3)]
    assert client.post("/api/jobs", json=batch).status_code == 402  # the batch as a whole
    assert len(client.get("/api/jobs").json()["jobs"]) == 1


def test_post_in_required_mode_needs_approved(project, client, kind):
    jobs.set_approval(project, threshold_usd=1.0, mode="required")
    ask = {"kind": kind, "params": {"estimated_usd": 3.0}}
    refused = client.post("/api/jobs", json=ask)
    assert refused.status_code == 402 and refused.json()["needs_approval"] is True
    assert "approval required" in refused.json()["error"]
    assert client.get("/api/jobs").json()["jobs"] == []
    assert client.post("/api/jobs", json={**ask, "approved": True}).status_code == 202


@pytest.mark.parametrize(
    "query, fragment",
    [
        ({"kind": "nope", "params": "{}"}, "unknown kind 'nope'"),
        ({"kind": "test.budgeted", "params": '{"estimated_usd": "abc"}'}, "estimated_usd"),
        ({"kind": "test.budgeted", "params": '{"estimated_usd": -5}'}, "estimated_usd"),
    ],
)
def test_estimate_refuses_an_unknown_kind_and_a_bad_figure(client, kind, query, fragment):
    response = client.get("/api/estimate", params=query)
    assert response.status_code == 400
    assert fragment in response.json()["error"]


def test_budgets_route_and_metrics_show_spent_of_cap(project, client, kind):
    done = jobs.enqueue(
        project, "paid", {"bill": 0.9, "estimated_usd": 0.6}, dispatch={"paid": billed}
    )
    wait_until(lambda: jobs.get_job(project, done.job_id).is_terminal)
    jobs.set_budget(project, 2.0, per="day")
    jobs.set_approval(project, mode="required")
    body = client.get("/api/budgets").json()
    (served,) = body["projects"]
    (row,) = served["budgets"]
    assert row["key"] == "all/day" and row["usd"] == 2.0
    assert row["spent_usd"] == pytest.approx(0.9) and row["remaining_usd"] == pytest.approx(1.1)
    assert served["approval"] == {"threshold_usd": 1.0, "mode": "required", "stored": True}
    text = client.get("/metrics").text
    root = json.dumps(str(project.root))
    assert (
        f'nw_jobs_budget_remaining_usd{{budget="all/day",project={root},scope="project"}} 1.1'
        in text
    )
    assert f'nw_jobs_cost_actual_to_quote_ratio{{kind="paid",project={root}}} 1.5' in text


def test_by_actor_totals_include_the_jobs_with_no_actor(project, client):
    for n, actor in enumerate(["ann", None, None]):
        job = jobs.enqueue(
            project, "paid", {"bill": 0.25, "n": n}, actor=actor, dispatch={"paid": billed}
        )
        wait_until(lambda j=job: jobs.get_job(project, j.job_id).is_terminal)
    today = client.get("/api/totals").json()["spend"]["today"]
    assert today["by_actor"] == {"ann": 0.25, "(no actor)": 0.5}
    assert sum(today["by_actor"].values()) == pytest.approx(today["usd"])
