"""Each endpoint alone: a plain function of a request whose app state names the projects."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette")
from starlette.exceptions import HTTPException
from starlette.requests import Request

from nw.jobs import enqueue, get_job
from nw.jobs.web import routes_console, routes_jobs, routes_summary, routes_tray
from nw.jobs.web.page_cache import PageCache
from nw.jobs.web.state import Projects
from nw.jobs.web.streams import Feeds, Marks
from tests.helpers import wait_until


def request_to(project, config, *, path_params=None, query=None, root_path=""):
    """A request as Starlette's router hands it to an endpoint, with no app around it."""
    closing, marks = threading.Event(), Marks(config)
    state = SimpleNamespace(
        projects=Projects([project]),
        config=config,
        poll_interval_s=0.05,
        stream_max_s=1.0,
        closing=closing,
        feeds=Feeds(0.05, closing),
        marks=marks,
        page_cache=PageCache(marks, live_ttl_s=0.05),
    )
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "root_path": root_path,
        "query_string": urlencode(query or {}).encode(),
        "headers": [],
        "path_params": path_params or {},
        "app": SimpleNamespace(state=state),
    }
    return Request(scope)


def body(response) -> dict:
    return json.loads(response.body)


def drawn(project, params):
    return {"cost_usd_actual": 0.01, "has_unknown_costs": False}


def test_get_job_alone_answers_the_job_of_either_store(project, cfg):
    job = enqueue(project, "draw", {"n": 1}, dispatch={"draw": drawn}, config=cfg)
    wait_until(
        lambda: (j := get_job(project, job.job_id, config=cfg)) and j.is_terminal,
        what="the job to finish",
    )
    response = routes_jobs.get_job(request_to(project, cfg, path_params={"job_id": job.job_id}))
    assert response.status_code == 200
    assert body(response)["job_id"] == job.job_id
    assert body(response)["status"] == "succeeded"
    assert body(response)["project"] == str(project.root)


def test_get_job_alone_is_404_for_an_unknown_id(project, cfg):
    request = request_to(project, cfg, path_params={"job_id": "0" * 64})
    with pytest.raises(HTTPException) as info:
        routes_jobs.get_job(request)
    assert info.value.status_code == 404


def test_list_jobs_alone_reads_its_query(project, cfg):
    assert body(routes_console.list_jobs(request_to(project, cfg))) == {"jobs": [], "next": None}
    with pytest.raises(HTTPException, match="limit must be from 1 to 1000"):
        routes_console.list_jobs(request_to(project, cfg, query={"limit": "0"}))


def test_summary_alone_names_the_served_projects(project, cfg):
    data = body(routes_summary.summary(request_to(project, cfg)))
    assert data["active"] == [] and data["recent"] == []
    assert data["projects"] == [
        {"root": str(project.root), "name": "proj", "title": "test project"}
    ]


def test_the_page_alone_is_based_on_its_mount_point(project, cfg):
    response = routes_tray.index(request_to(project, cfg, root_path="/jobs"))
    assert '<base href="/jobs/">' in response.body.decode()
