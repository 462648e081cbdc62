"""PostgreSQL restarting under the facade and under worker processes.

These restart the local server (``pg_ctlcluster … restart``), so they run
only where the test database is this machine's cluster and we may restart it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections import Counter
from urllib.parse import urlparse

import pytest

from nw import jobs
from nw.jobs.core.errors import JobStoreError
from tests.conftest import POSTGRES_URL, purge_postgres_project, require_postgres
from tests.fixtures import bodies
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _cluster() -> list[str] | None:
    if shutil.which("pg_ctlcluster") is None or not os.path.isdir("/etc/postgresql"):
        return None
    if urlparse(POSTGRES_URL).hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    versions = [v for v in os.listdir("/etc/postgresql") if _version_key(v) is not None]
    if not versions:
        return None
    newest = max(versions, key=_version_key)  # numerically: 10 is newer than 9.6
    return ["pg_ctlcluster", "--skip-systemctl-redirect", newest, "main"]


def _version_key(name: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return None


def pg_ctl(action: str) -> None:
    subprocess.run([*_cluster(), action], check=True, timeout=120, capture_output=True)
    if action != "stop":
        wait_until(
            lambda: subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0,
            timeout=60,
            what="PostgreSQL to accept connections",
        )


@pytest.fixture
def restartable(project):
    require_postgres()
    if _cluster() is None:
        pytest.skip("the test database is not a local cluster this test may restart")
    yield
    # whatever happened, leave the server running (and the test database clean)
    if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode != 0:
        pg_ctl("start")
    purge_postgres_project(project)


def test_the_facade_reconnects_across_a_restart(project, restartable, gate):
    cfg = jobs.JobsConfig(
        database_url=POSTGRES_URL,
        heartbeat_interval_s=0.2,
        heartbeat_stale_s=30.0,  # longer than the outage: a restart must not reap live jobs
    )
    job = jobs.enqueue(project, "r", {}, dispatch={"r": gate}, config=cfg)
    assert gate.started.wait(5)
    # When the server restarts under a running body
    pg_ctl("restart")
    gate.release.set()
    # Then the body's outcome is written through a new connection, and nothing is lost
    done = wait_until(
        lambda: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j,
        timeout=30,
    )
    assert done.status == jobs.SUCCEEDED and gate.calls == 1
    again = jobs.enqueue(project, "r", {"n": 2}, dispatch={"r": lambda p, q: 2}, config=cfg)
    wait_until(lambda: jobs.get_job(project, again.job_id, config=cfg).is_terminal)
    assert [j.status for j in jobs.list_jobs(project, config=cfg)] == [jobs.SUCCEEDED] * 2


def test_a_write_that_cannot_reach_the_database_raises(project, restartable, monkeypatch):
    from nw.jobs.stores.postgres import PostgresJobStore

    monkeypatch.setenv("NW_JOBS_PG_RETRY_S", "1")
    store = PostgresJobStore(POSTGRES_URL, project.project_id)
    store.create(
        {"job_id": "f" * 64, "kind": "r", "created_at": time.time(), "attempt": 0},
        claimable=False,
    )
    pg_ctl("stop")
    try:
        with pytest.raises(JobStoreError, match="unreachable"):
            store.patch("f" * 64, {"note": "lost?"}, attempt=None)
        with pytest.raises(JobStoreError):
            store.get("f" * 64)
    finally:
        pg_ctl("start")
    assert store.patch("f" * 64, {"note": "kept"}, attempt=None)
    assert store.get("f" * 64).record["note"] == "kept"


def test_four_workers_run_1000_jobs_exactly_once_across_a_restart(project, restartable, tmp_path):
    bodies.register_all()
    cfg = jobs.JobsConfig(database_url=POSTGRES_URL)
    log = tmp_path / "ran.log"
    for i in range(1000):
        jobs.enqueue(project, "t.nap", {"i": i, "log": str(log), "seconds": 0.1}, config=cfg)
    # The job beat outlives the outage; the worker beat keeps its 6 s default: silence
    # during an outage judges nobody (liveness.py), so no live job may be reaped here.
    extra = ("--heartbeat-stale", "30")
    workers = [
        start_worker(
            project,
            max_concurrent=8,
            database_url=POSTGRES_URL,
            extra=extra,
            log_path=tmp_path / f"w{n}.log",
        )
        for n in range(4)
    ]

    def succeeded() -> int:
        return len(jobs.summarize(project, status="succeeded", limit=10_000, config=cfg))

    try:
        wait_until(lambda: succeeded() >= 150, timeout=60, what="the drain to be under way")
        pg_ctl("restart")
        # Sampled once the server is back: fewer than 1000 done now means the drain
        # was still running when the server went down (a count only grows).
        at_restart = succeeded()
        wait_until(lambda: succeeded() == 1000, timeout=120, what="1000 jobs done")
    finally:
        for w in workers:
            stop(w)
    assert at_restart < 1000, "the drain ended before the restart: nothing was proven"
    print(f"{at_restart} of 1000 jobs had succeeded when the server came back")
    counts = Counter(log.read_text().split())
    assert len(counts) == 1000 and set(counts.values()) == {1}, counts.most_common(3)
    assert all(w.returncode == 0 for w in workers)
    assert jobs.list_jobs(project, status="failed", config=cfg) == []


def test_four_workers_run_1000_jobs_exactly_once_across_an_outage_each_sees_apart(
    project, tmp_path
):
    """The restart above, without restarting the shared server: each worker
    reaches it through a relay of its own, all are cut for longer than both
    liveness windows (the job's heartbeat too) and come back a few tenths of a
    second apart, so the first back judges the others before they could beat."""
    from tests.integration.pg_proxy import relayed

    url = require_postgres()
    bodies.register_all()
    cfg = jobs.JobsConfig(database_url=url, worker_stale_s=6.0)
    log = tmp_path / "ran.log"
    for i in range(1000):
        jobs.enqueue(project, "t.nap", {"i": i, "log": str(log), "seconds": 0.1}, config=cfg)
    extra = ("--heartbeat-interval", "1", "--heartbeat-stale", "4")

    def succeeded() -> int:  # summarize judges nobody (this process never lost the server)
        return len(jobs.summarize(project, status="succeeded", limit=10_000, config=cfg))

    with contextlib.ExitStack() as stack:
        relays = [stack.enter_context(relayed(url)) for _ in range(4)]
        workers = [
            start_worker(
                project,
                max_concurrent=8,
                database_url=through,
                extra=extra,
                log_path=tmp_path / f"w{n}.log",
            )
            for n, (_, through) in enumerate(relays)
        ]
        try:
            wait_until(lambda: succeeded() >= 150, timeout=60, what="the drain to be under way")
            for relay, _ in relays:
                relay.cut()
            at_cut = succeeded()
            time.sleep(cfg.worker_stale_s + 2)  # the scenario: an outage past both windows
            for relay, _ in relays:
                relay.restore()
                time.sleep(0.3)  # the scenario: each back a little after the last
            wait_until(lambda: succeeded() == 1000, timeout=120, what="1000 jobs done")
        finally:
            for relay, _ in relays:
                relay.restore()
            for w in workers:
                stop(w)
            purge_postgres_project(project)
    assert at_cut < 1000, "the drain ended before the outage: nothing was proven"
    counts = Counter(log.read_text().split())
    assert len(counts) == 1000 and set(counts.values()) == {1}, counts.most_common(3)
    assert all(w.returncode == 0 for w in workers)
