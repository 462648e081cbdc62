"""PostgreSQL misconfiguration fails fast, in one line, without the password.

An unknown role or database (or a rejected password) is not an outage: it is
reported at once instead of being retried for ``NW_JOBS_PG_RETRY_S``. Here the
retry window is ten minutes, so a retried error would run into the
subprocess's deadline. Only a transient fault (nothing listening: a server
restarting) is retried, and says so when it gives up.

This server trusts every local connection, so a wrong password cannot be
provoked without changing its configuration (which the shared server must not
get); the classification of that message is tested on its text.
"""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlparse

import pytest

import nw
from tests.conftest import require_postgres
from tests.helpers import REPO

pytestmark = pytest.mark.postgres
SECRET = "s3cret-pw-do-not-print"


def _url(base: str, *, user: str | None = None, db: str | None = None, port=None) -> str:
    parts = urlparse(base)
    user = user or parts.username or "postgres"
    host, port = parts.hostname or "127.0.0.1", port or parts.port or 5432
    return f"postgresql://{user}:{SECRET}@{host}:{port}/{db or parts.path.lstrip('/')}"


def _nw_jobs(url: str, *args: str, retry_s: str = "600") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NW_JOBS_")}
    env.update(PYTHONPATH=REPO, NW_JOBS_DATABASE_URL=url, NW_JOBS_PG_RETRY_S=retry_s)
    return subprocess.run(
        [sys.executable, "-m", "nw.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,  # far inside the ten-minute retry window: a retried error fails here
    )


@pytest.fixture
def project(tmp_path):
    return nw.Project.init(tmp_path / "proj")


@pytest.mark.parametrize(
    ("which", "named"),
    [("role", 'role "nw_no_such_role" does not exist'), ("db", 'database "nw_no_such_db"')],
)
@pytest.mark.parametrize("command", ["list", "worker"])
def test_an_unknown_role_or_database_is_one_line_and_exit_1(project, which, named, command):
    base = require_postgres()
    url = _url(base, user="nw_no_such_role") if which == "role" else _url(base, db="nw_no_such_db")
    out = _nw_jobs(url, command, "--project", str(project.root))
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert named in lines[0] and SECRET not in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


def test_a_server_that_does_not_answer_is_retried_then_reported(project):
    base = require_postgres()
    out = _nw_jobs(_url(base, port=1), "list", "--project", str(project.root), retry_s="1")
    assert out.returncode == 1, out
    # at most one line saying it retries (not one per attempt), then one saying why it stopped
    *retrying, error = out.stderr.strip().splitlines()
    assert len(retrying) <= 1 and all("retrying" in line for line in retrying), out.stderr
    assert "unreachable (gave up after 1 s)" in error and "Connection refused" in error
    assert SECRET not in out.stderr


@pytest.mark.parametrize(
    ("message", "permanent"),
    [
        ('FATAL:  password authentication failed for user "app"', True),
        ('FATAL:  role "app" does not exist', True),
        ('FATAL:  database "films" does not exist', True),
        ('FATAL:  no pg_hba.conf entry for host "10.0.0.2", user "app"', True),
        ("fe_sendauth: no password supplied", True),
        ('FATAL:  permission denied for database "films"', True),
        ('FATAL:  role "app" is not permitted to log in', True),
        ("Connection refused\n\tIs the server running on that host", False),
        ("FATAL:  the database system is starting up", False),
        ("FATAL:  the database system is shutting down", False),
        ("server closed the connection unexpectedly", False),
    ],
)
def test_which_connection_errors_are_misconfiguration(message, permanent):
    from nw.jobs.stores.pg_database import misconfiguration

    found = misconfiguration(f'connection to server at "127.0.0.1", port 5432 failed: {message}')
    assert (found is not None) is permanent


def test_a_misconfiguration_is_found_before_any_pool_is_made(monkeypatch):
    from nw.jobs.core.errors import JobStoreError
    from nw.jobs.stores import pg_database, pg_pool

    monkeypatch.setenv("NW_JOBS_PG_RETRY_S", "600")
    url = _url(require_postgres(), user="nw_no_such_role")
    with pytest.raises(JobStoreError, match='cannot connect: role "nw_no_such_role" does not'):
        pg_database.Database(url).run(lambda conn, _retried: None, what="a first read")
    assert url not in pg_pool._POOLS  # no pool retrying it in the background
