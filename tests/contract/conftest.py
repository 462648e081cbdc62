"""The store under contract is the root conftest's `store`; here, its read-only twin."""

from __future__ import annotations

import pytest


@pytest.fixture
def reader(store, tmp_path):
    """A read-only handle on the same store."""
    if store.__class__.__name__ == "SqliteJobStore":
        from nw.jobs.stores.sqlite import SqliteJobStore

        return SqliteJobStore(store.path, read_only=True)
    from nw.jobs.stores.postgres import PostgresJobStore

    return PostgresJobStore(store.db.url, store.project_id, read_only=True)
