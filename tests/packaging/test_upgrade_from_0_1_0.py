"""Upgrading from the previous release: a project folder and a PostgreSQL
schema written by the code at 5f55dc6 (it reports 0.1.0) are opened by this
one, migrated, and read unchanged: every job, the spend, the limits, the
learned durations. The fixtures and how they were made:
``tests/fixtures/release_0_1_0/make_fixture.py``."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import nw
from nw import jobs
from nw.jobs.stores import open_store
from nw.jobs.stores.pg_schema import LATEST_VERSION
from nw.jobs.stores.sqlite import SCHEMA_VERSION
from tests.conftest import require_postgres
from tests.fixtures.release_0_1_0.make_fixture import read

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "release_0_1_0"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def _project(tmp_path: Path) -> nw.Project:
    """The previous release's project folder: its id, and its embedded store's file."""
    root = tmp_path / "my-film"
    (root / ".nw" / "jobs").mkdir(parents=True)
    shutil.copy(FIXTURES / "project.json", root / ".nw" / "project.json")
    conn = sqlite3.connect(root / ".nw" / "jobs" / "jobs.sqlite3")
    try:
        conn.executescript((FIXTURES / "sqlite_jobs.sql").read_text())
    finally:
        conn.close()
    return nw.Project(root)


def reads_the_same(got: object, expected: object, where: str = "") -> None:
    """``got`` holds everything the previous release read, unchanged: every
    value equal, every list as long and in order; a mapping may have gained a
    key (a minor release may add a field), never lost or changed one."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not a mapping"
        for key, value in expected.items():
            assert key in got, f"{where}.{key}: gone"
            reads_the_same(got[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), f"{where}: {got!r}"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            reads_the_same(g, e, f"{where}[{i}]")
    else:
        assert got == expected, f"{where}: {got!r}, the previous release read {expected!r}"


def test_the_comparison_fails_on_a_changed_or_lost_value_and_passes_an_added_key() -> None:
    reads_the_same({"a": [1, {"b": 2}], "c": 3}, {"a": [1, {"b": 2}]})
    for changed in ({"a": [1, {"b": 3}]}, {"a": [1]}, {"c": 3}, {"a": [1, {}]}):
        with pytest.raises(AssertionError):
            reads_the_same(changed, {"a": [1, {"b": 2}]})


def test_the_fixtures_hold_every_ending_spend_a_learned_duration_and_a_limit() -> None:
    assert EXPECTED["release"] == "0.1.0"
    for backend in ("sqlite", "postgres"):
        seen = EXPECTED[backend]
        statuses = {job["status"] for job in seen["jobs"]}
        assert statuses == {"queued", "cancelled", "failed", "succeeded"}
        assert {job["error_kind"] for job in seen["jobs"]} >= {"refused", "crashed", "cancelled"}
        assert seen["spend"]["actual_usd"] > 0
        assert any(len(samples) >= 4 for samples in seen["samples"].values())
        assert seen["limits"] == [{"key": "fal:kling", "max_running": 2, "per_second": 5}]


def test_an_embedded_project_of_the_previous_release_is_upgraded_and_reads_the_same(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    path = project.root / ".nw" / "jobs" / "jobs.sqlite3"
    before = sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]
    config = jobs.JobsConfig()
    # opening it to write (a worker, an enqueue) upgrades the file in place
    open_store(project, config, create=True).close()
    after = sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]
    assert before <= after == SCHEMA_VERSION
    reads_the_same(read(project, config), EXPECTED["sqlite"])


@pytest.mark.postgres
def test_a_postgres_schema_of_the_previous_release_is_migrated_and_reads_the_same(
    tmp_path: Path,
) -> None:
    import psycopg

    admin_url = require_postgres()
    name = f"nw_upgrade_{uuid.uuid4().hex[:12]}"
    db_url = f"{admin_url.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        # the previous release's schema and rows, as pg_dump wrote them
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute((FIXTURES / "pg_nw_jobs.sql").read_text())
        # the operator's step: `nw-jobs db migrate`, with this release
        done = subprocess.run(
            [sys.executable, "-m", "nw.cli", "db", "migrate", "--database-url", db_url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        with psycopg.connect(db_url) as conn:
            (at,) = conn.execute("SELECT max(version) FROM nw_jobs.schema_migrations").fetchone()
        assert at == LATEST_VERSION  # every migration of this release applied
        config = jobs.JobsConfig(database_url=db_url)
        project = _project(tmp_path)
        reads_the_same(read(project, config), EXPECTED["postgres"])
    finally:
        from nw.jobs.stores.pg_pool import close_pools

        close_pools()
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
