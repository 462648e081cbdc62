from __future__ import annotations

import os
import threading

import pytest

import nw
from nw.jobs import JobsConfig
from nw.jobs.runtime import shutdown_runtimes
from nw.jobs.stores import close_shared_stores

POSTGRES_URL = os.environ.get("NW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    """Each test starts with no runtimes, no kept store handles, no env URL."""
    monkeypatch.delenv("NW_JOBS_DATABASE_URL", raising=False)
    yield
    shutdown_runtimes(wait=False)
    close_shared_stores()


@pytest.fixture
def project(tmp_path):
    return nw.Project.init(tmp_path / "proj", title="test project")


@pytest.fixture
def cfg():
    """Fast liveness so tests about beats and reaps finish in seconds."""
    return JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, stale_running_s=2.0)


class Gate:
    """A body that blocks until released (or cancelled), to hold a job RUNNING."""

    def __init__(self):
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, project, params, *, should_cancel, on_event):
        from nw.jobs import JobCancelled

        self.calls += 1
        self.started.set()
        while not self.release.wait(0.01):
            if should_cancel():
                raise JobCancelled("stopped at a boundary")
        on_event({"stage_index": 1, "stage_count": 1})
        return {"ok": True}


@pytest.fixture
def gate():
    g = Gate()
    yield g
    g.release.set()
