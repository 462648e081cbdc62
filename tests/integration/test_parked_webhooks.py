"""Parked jobs resumed by the provider's webhook on ``nw-jobs serve``'s app: signed
per job and attempt, kept when it arrives before the park (or while no worker
runs), idempotent, and refused (nothing changed) when wrongly signed or late."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from starlette.testclient import TestClient

from nw import jobs
from nw.jobs.execution import hooks
from nw.jobs.web import create_app
from tests.fixtures import parked_kinds
from tests.fixtures.parked_kinds import lines
from tests.helpers import wait_until
from tests.integration.test_parked import done, parked, start
from tests.integration.workers import stop

pytestmark = pytest.mark.slow

OK = {"status": "OK", "payload": {"video": "https://fake/by-webhook.mp4"}}


@pytest.fixture(autouse=True)
def _kinds(monkeypatch):
    parked_kinds.register()
    monkeypatch.setenv(hooks.PUBLIC_URL_ENV, "http://testserver")


@pytest.fixture
def fake(tmp_path):
    folder = tmp_path / "provider"
    folder.mkdir()
    return folder


def path_of(url: str) -> str:
    return urlsplit(url).path


def test_a_webhook_finishes_a_parked_job_and_a_second_delivery_changes_nothing(cfg, project, fake):
    # Given a job parked by a worker, its body given a signed webhook URL
    job = jobs.enqueue(project, "p.hooked", {"dir": str(fake)}, config=cfg)
    worker = start(project, cfg)
    client = TestClient(create_app([project], config=cfg))
    try:
        parked(project, job.job_id, cfg)
        url = (fake / "webhook_urls.log").read_text()
        assert url.startswith(f"http://testserver/hooks/{job.job_id}/1/")
        # When the provider posts its completion
        answer = client.post(path_of(url), json=OK)
        assert answer.status_code == 200 and answer.json()["applied"] is True
        end = done(project, job.job_id, cfg)
        # Then the job succeeds with the webhook's result
        assert end.status == jobs.SUCCEEDED, end.error
        assert end.result["via"] == "webhook"
        # And the same delivery again is answered without changing anything
        again = client.post(path_of(url), json={"status": "ERROR", "error": "late"})
        assert again.status_code == 200 and again.json()["applied"] is False
        assert jobs.get_job(project, job.job_id, config=cfg).result == end.result
    finally:
        stop(worker)
    assert len(lines(fake, "submits.log")) == 1


def test_a_wrongly_signed_webhook_is_refused_and_the_job_stays_parked(cfg, project, fake):
    job = jobs.enqueue(project, "p.hooked", {"dir": str(fake)}, config=cfg)
    worker = start(project, cfg)
    client = TestClient(create_app([project], config=cfg))
    try:
        parked(project, job.job_id, cfg)
        url = path_of((fake / "webhook_urls.log").read_text())
        forged = url.rsplit("/", 1)[0] + "/" + "0" * 64
        other_attempt = url.replace(f"/{job.job_id}/1/", f"/{job.job_id}/2/")
        for bad in (forged, other_attempt, f"/hooks/{'x' * 40}/1/{'0' * 64}"):
            answer = client.post(bad, json=OK)
            assert answer.status_code == 403, bad
        # nothing was kept: a rightly signed "still queued" is applied after them,
        # and the job is still parked (a forged completion would have ended it)
        still = client.post(url, json={"status": "IN_QUEUE", "position": 7})
        assert still.json() == {"applied": True, "kept": "noted"}
        seen = wait_until(
            lambda: (
                (j := jobs.get_job(project, job.job_id, config=cfg)).parked["position"] == 7 and j
            ),
            timeout=10,
            what="the position the webhook said",
        )
        assert seen.status == jobs.RUNNING
        assert seen.waiting == "waiting on fake, 7th in queue"
    finally:
        stop(worker)


def test_a_webhook_that_arrives_before_the_park_is_recorded_is_kept_and_applied(cfg, project, fake):
    # Given an in-process body whose provider answers (by webhook) before the body returns
    client = TestClient(create_app([project], config=cfg))
    answers = []

    def render(project, params, *, webhook_url):
        answers.append(client.post(path_of(webhook_url), json=OK).json())
        return jobs.Submitted("req-early", provider="fake")

    job = jobs.enqueue(
        project, "p.hooked", {"dir": str(fake)}, dispatch={"p.hooked": render}, config=cfg
    )
    # Then the webhook was kept for the park, and the park applied it
    end = done(project, job.job_id, cfg)
    assert answers == [{"applied": True, "kept": "kept"}]
    assert end.status == jobs.SUCCEEDED, end.error
    assert end.result["via"] == "webhook"


def test_a_webhook_that_arrives_while_no_worker_runs_is_applied_by_the_next(cfg, project, fake):
    job = jobs.enqueue(project, "p.hooked", {"dir": str(fake)}, config=cfg)
    worker = start(project, cfg)
    try:
        parked(project, job.job_id, cfg)
    finally:
        stop(worker)
    url = path_of((fake / "webhook_urls.log").read_text())
    answer = TestClient(create_app([project], config=cfg)).post(url, json=OK)
    assert answer.json() == {"applied": True, "kept": "noted"}
    assert jobs.get_job(project, job.job_id, config=cfg).status == jobs.RUNNING
    worker = start(project, cfg)
    try:
        end = done(project, job.job_id, cfg)
    finally:
        stop(worker)
    assert end.status == jobs.SUCCEEDED and end.result["via"] == "webhook"
    assert len(lines(fake, "submits.log")) == 1


def test_a_hostile_webhook_is_refused_whole_and_nothing_is_kept(sqlite_cfg, project, fake):
    # Given a parked in-process job and its rightly signed URL
    cfg = sqlite_cfg
    urls = []

    def render(project, params, *, webhook_url):
        urls.append(webhook_url)
        return jobs.Submitted("req-hostile", provider="fake")

    job = jobs.enqueue(project, "p.hooked", {"dir": str(fake)}, dispatch={"p.hooked": render},
                       config=cfg)  # fmt: skip
    parked(project, job.job_id, cfg)
    client = TestClient(create_app([project], config=cfg))
    url = path_of(urls[0])
    headers = {"Content-Type": "application/json"}
    # When bodies that are not storable JSON arrive, or paths that name no job
    for body in ('{"status": "OK\\u0000"}', '{"a": "\\ud800"}', "not json", "[1, 2", "NaN"):
        assert client.post(url, content=body, headers=headers).status_code == 400, body
    for bad in ("/hooks/%00/1/00", "/hooks/<script>/1/" + "0" * 64, "/hooks/x/-1/0"):
        assert client.post(bad, json=OK).status_code in (403, 404), bad
    # Then nothing was kept: the job is still parked, its request unchanged
    seen = jobs.get_job(project, job.job_id, config=cfg)
    assert seen.status == jobs.RUNNING and seen.parked["request_id"] == "req-hostile"
    # And a rightly signed, well-formed one still finishes it
    assert client.post(url, json=OK).json()["applied"] is True
    assert done(project, job.job_id, cfg).result["via"] == "webhook"
