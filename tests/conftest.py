from __future__ import annotations

import os
import re
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest

import nw
from nw.jobs import JobsConfig
from nw.jobs.execution.runtimes import shutdown_runtimes
from nw.jobs.stores import close_shared_stores
from tests.helpers import strict_skips

POSTGRES_URL = os.environ.get("NW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("NW_REQUIRE_POSTGRES") == "1"
_pg_problem: list[str | None] = []


def _redacted(text: str) -> str:
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)


def postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used here (None: it can); asked once per session."""
    if not _pg_problem:
        try:
            import psycopg

            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            from nw.jobs.stores.postgres import migrate

            migrate(POSTGRES_URL)  # what a deploy runs once: `nw-jobs db migrate`
            _pg_problem.append(None)
        except Exception as exc:  # ImportError included: the extra is not installed
            _pg_problem.append(f"{type(exc).__name__}: {_redacted(str(exc)).strip()}")
    return _pg_problem[0]


def require_postgres() -> str:
    """The test database URL, or skip (fail under NW_REQUIRE_POSTGRES=1) with the reason."""
    problem = postgres_problem()
    if problem is None:
        return POSTGRES_URL
    reason = (
        f"PostgreSQL is not reachable at {_redacted(POSTGRES_URL)} ({problem}); "
        "start it or set NW_TEST_DATABASE_URL"
    )
    if REQUIRE_POSTGRES:
        pytest.fail(f"NW_REQUIRE_POSTGRES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def purge_postgres_project(project) -> None:
    """Drop a test project's rows from the shared test database."""
    project_id = project.read_meta().get("project_id")
    if not project_id or postgres_problem() is not None:
        return
    from nw.jobs.stores.postgres import PostgresJobStore

    PostgresJobStore(POSTGRES_URL, project_id).purge()


def clear_postgres_limits(config) -> None:
    """Drop every limit of the test database (limits are database-wide, not a project's)."""
    if not config.database_url:
        return
    import psycopg

    with psycopg.connect(config.database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM nw_jobs.limits")


def postgres_rows(project) -> str:
    """Every stored row of a project in the test database, as text (to compare
    before/after, or to search for what must never be stored)."""
    import psycopg

    project_id = project.read_meta().get("project_id")
    with psycopg.connect(POSTGRES_URL) as conn:
        parts = [
            conn.execute(
                f"SELECT coalesce(string_agg(t::text, chr(10) ORDER BY t::text), '')"
                f" FROM nw_jobs.{table} t WHERE project_id = %s",
                (project_id,),
            ).fetchone()[0]
            for table in ("jobs", "progress", "durations", "runners")
        ]
    return "\n".join(parts)


def stored_jobs(project, cfg) -> int:
    """How many jobs the project has, counted in the store itself (not through
    the API a test is checking)."""
    if cfg.database_url:
        return postgres_job_count(project)
    path = Path(project.root) / cfg.jobs_dirname / "jobs.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


def postgres_job_count(project) -> int:
    """How many jobs the project has in the test database (0 without one)."""
    project_id = project.read_meta().get("project_id")
    if not project_id or postgres_problem() is not None:
        return 0
    import psycopg

    with psycopg.connect(POSTGRES_URL) as conn:
        return conn.execute(
            "SELECT count(*) FROM nw_jobs.jobs WHERE project_id = %s", (project_id,)
        ).fetchone()[0]


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


# ----- under NW_REQUIRE_POSTGRES=1 / NW_REQUIRE_BROWSER=1 (CI) nothing may be skipped ----
def _skip_is_a_failure(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and strict_skips():
        where = report.longrepr
        reason = where[2] if isinstance(where, tuple) and len(where) == 3 else str(where)
        report.outcome = "failed"
        report.longrepr = f"skipped under NW_REQUIRE_POSTGRES/NW_REQUIRE_BROWSER: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _skip_is_a_failure(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield  # a module-level skip (importorskip) is a collection report
    _skip_is_a_failure(outcome.get_result())


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
def sqlite_cfg():
    """The embedded store only: for tests about the SQLite file itself."""
    return JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, stale_running_s=2.0)


@pytest.fixture(params=BACKENDS)
def cfg(request):
    """Fast liveness so tests about beats and reaps finish in seconds; once per
    backend (the embedded SQLite file, then PostgreSQL by ``database_url``)."""
    fast = {"heartbeat_interval_s": 0.2, "heartbeat_stale_s": 1.0, "stale_running_s": 2.0}
    if request.param == "sqlite":
        yield JobsConfig(**fast)
        return
    url = require_postgres()
    proj = request.getfixturevalue("project") if "project" in request.fixturenames else None
    yield JobsConfig(**fast, database_url=url)
    shutdown_runtimes(wait=False)
    close_shared_stores()
    if proj is not None:
        purge_postgres_project(proj)


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    """One project's store, called directly: the SQLite file, then PostgreSQL."""
    if request.param == "sqlite":
        from nw.jobs.stores.sqlite import SqliteJobStore

        s = SqliteJobStore(tmp_path / "jobs.sqlite3")
        yield s
        s.close()
        return
    url = require_postgres()
    from nw.jobs.stores.postgres import PostgresJobStore

    s = PostgresJobStore(url, f"store-{uuid.uuid4().hex}")
    yield s
    s.purge()
    s.close()


class Gate:
    """A body that blocks until released (or cancelled), to hold a job RUNNING."""

    def __init__(self):
        self.started = threading.Event()
        self.release = threading.Event()
        self.cancelled = threading.Event()
        """Set when the body saw ``should_cancel()`` and stopped at its boundary."""
        self.calls = 0

    def __call__(self, project, params, *, should_cancel, on_event):
        from nw.jobs import JobCancelled

        self.calls += 1
        self.started.set()
        while not self.release.wait(0.01):
            if should_cancel():
                self.cancelled.set()
                raise JobCancelled("stopped at a boundary")
        on_event({"stage_index": 1, "stage_count": 1})
        return {"ok": True}


@pytest.fixture
def gate():
    g = Gate()
    yield g
    g.release.set()
