"""``nw.providers.fal`` against a local fake of fal's queue routes: submit, the
queue position while waiting, the result with its billable units, the
completion webhook, and a remote cancel; on both stores."""

from __future__ import annotations

import socket
import threading

import pytest
import uvicorn

from nw import jobs
from nw.jobs.execution import hooks
from nw.jobs.web import create_app
from tests.fixtures import fal_kinds
from tests.fixtures.fake_fal import KEY, FakeFal
from tests.helpers import wait_until
from tests.integration.test_parked import done, parked
from tests.integration.workers import start_worker, stop

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _kinds():
    fal_kinds.register()


@pytest.fixture
def fal(monkeypatch):
    fake = FakeFal(takes_s=1.5).start()
    monkeypatch.setenv("NW_FAL_QUEUE_URL", fake.url)
    monkeypatch.setenv("FAL_KEY", KEY)
    yield fake
    fake.close()


def fal_worker(project, cfg, fake):
    return start_worker(
        project,
        database_url=cfg.database_url,
        extra=("--import", "tests.fixtures.fal_kinds"),
        env={"NW_FAL_QUEUE_URL": fake.url, "NW_SECRET_FAL": KEY, "FAL_KEY": ""},
    )


def test_a_fal_render_parks_shows_its_queue_and_finishes_with_its_units(cfg, project, fal):
    fal.takes_s = 4.0
    job = jobs.enqueue(project, "fal.kling", {"prompt": "a heron"}, config=cfg)
    worker = fal_worker(project, cfg, fal)
    try:
        seen = parked(project, job.job_id, cfg)
        assert seen.parked["provider"] == "fal"
        assert seen.waiting.startswith("waiting on fal")
        end = done(project, job.job_id, cfg)
    finally:
        stop(worker)
    assert end.status == jobs.SUCCEEDED, end.error
    assert end.result["video"]["url"].endswith(".mp4")
    assert end.result["billable_units"] == 5
    assert end.cost.actual_usd == pytest.approx(0.35)
    assert fal.stats["submits"] == 1 and fal.stats["status"] >= 1


def test_cancel_of_a_fal_render_cancels_it_at_fal(cfg, project, fal):
    fal.takes_s = 60.0
    job = jobs.enqueue(project, "fal.kling", {"prompt": "a slow heron"}, config=cfg)
    worker = fal_worker(project, cfg, fal)
    try:
        parked(project, job.job_id, cfg)
        jobs.cancel_job(project, job.job_id, config=cfg)
        end = done(project, job.job_id, cfg)
    finally:
        stop(worker)
    assert end.status == jobs.CANCELLED
    assert fal.stats["cancels"] == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fal_s_completion_webhook_finishes_the_job_before_any_poll(cfg, project, fal, monkeypatch):
    # Given nw-jobs' app served on a port fal's fake can post to
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app([project], config=cfg), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, what="the app serving")
    monkeypatch.setenv(hooks.PUBLIC_URL_ENV, f"http://127.0.0.1:{port}")
    try:
        # When an in-process fal render submits with its webhook URL
        dispatch = {"fal.kling": fal_kinds.KLING.body}
        job = jobs.enqueue(project, "fal.kling", {"prompt": "hook"}, dispatch=dispatch, config=cfg)
        end = done(project, job.job_id, cfg)
    finally:
        server.should_exit = True
        thread.join(10)
    # Then fal's webhook finished it (no status poll came first: its first is 30 s out)
    assert end.status == jobs.SUCCEEDED, end.error
    assert end.result["video"]["url"].endswith(".mp4")
    assert fal.stats["webhooks"] == 1 and fal.stats["status"] == 0
