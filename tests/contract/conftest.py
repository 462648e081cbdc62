"""The store under contract: one fixture, parametrized over every backend."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import BACKENDS, require_postgres


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        from nw.jobs.stores.sqlite import SqliteJobStore

        s = SqliteJobStore(tmp_path / "jobs.sqlite3")
        yield s
        s.close()
        return
    url = require_postgres()
    from nw.jobs.stores.postgres import PostgresJobStore

    s = PostgresJobStore(url, f"contract-{uuid.uuid4().hex}")
    yield s
    s.purge()
    s.close()


@pytest.fixture
def reader(store, tmp_path):
    """A read-only handle on the same store."""
    if store.__class__.__name__ == "SqliteJobStore":
        from nw.jobs.stores.sqlite import SqliteJobStore

        return SqliteJobStore(store.path, read_only=True)
    from nw.jobs.stores.postgres import PostgresJobStore

    return PostgresJobStore(store.db.url, store.project_id, read_only=True)
