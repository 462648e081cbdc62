"""A served project is kept reaped by the server itself, with no CLI read."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("starlette")  # under NW_REQUIRE_*, conftest makes this a failure
with warnings.catch_warnings():  # newer Starlette nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw import jobs
from nw.jobs.web import create_app
from tests.helpers import python_process, wait_until
from tests.integration.test_honest_reads import DEAD_SCRIPT


def _dead_jobs(project, cfg) -> list[str]:
    with python_process(DEAD_SCRIPT.format(url=cfg.database_url, root=str(project.root))) as proc:
        return proc.stdout.readline().split()


def test_the_server_reaps_a_dead_workers_jobs_while_only_read_only_views_look(project, cfg):
    dead = _dead_jobs(project, cfg)
    # summarize never reaps: before the server runs, the jobs read running, worker lost
    seen = jobs.summarize(project, config=cfg)
    assert {j.status for j in seen} == {jobs.RUNNING}
    assert {j.worker_responsive for j in seen} == {False}
    with TestClient(create_app([project], config=cfg)):  # the lifespan runs the reaper
        ended = wait_until(
            lambda: (
                (page := jobs.summarize(project, config=cfg))
                and all(j.is_terminal for j in page)
                and page
            ),
            timeout=30,
            what="the server's reaper to close the dead jobs",
        )
    assert sorted(j.job_id for j in ended) == sorted(dead)
    assert {(j.status, j.error_kind) for j in ended} == {(jobs.FAILED, "crashed")}


def test_without_the_server_nothing_reaps_them(project, cfg):
    _dead_jobs(project, cfg)
    create_app([project], config=cfg)  # made but never run: no lifespan, no reaper
    page = jobs.summarize(project, config=cfg)
    assert {j.status for j in page} == {jobs.RUNNING}
