"""Choosing a project's store: the embedded SQLite file, or PostgreSQL by URL."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal, overload

from nw.errors import ConfigError, InvalidSetting
from nw.jobs.core.model import JobsConfig
from nw.jobs.stores.base import JobStore
from nw.project import Project

DATABASE_URL_ENV = "NW_JOBS_DATABASE_URL"


def database_url(config: JobsConfig) -> str | None:
    url = config.database_url or os.environ.get(DATABASE_URL_ENV) or None
    if url and not url.startswith(("postgresql://", "postgres://")):
        raise InvalidSetting(
            f"{DATABASE_URL_ENV} / JobsConfig.database_url must be a postgresql:// URL"
        )
    return url


def postgres_opener() -> Callable[..., JobStore | None]:
    """``open_postgres_store``, or ``ConfigError`` in one line when the extra is absent."""
    try:
        from nw.jobs.stores.postgres import open_postgres_store
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("psycopg"):
            raise
        raise ConfigError(
            f"{DATABASE_URL_ENV} / JobsConfig.database_url names a PostgreSQL database, but"
            f" {exc.name} is not installed: pip install 'nw-jobs[postgres]'"
        ) from None
    return open_postgres_store


def store_location(project: Project, config: JobsConfig) -> tuple[str, str]:
    """(backend name, where): the key one process shares a store under.

    PostgreSQL: one database holds many projects, so the key names the
    project too (by its id; by its folder before it has one, when there is no
    store to share anyway)."""
    url = database_url(config)
    if url:
        ns = project.read_meta().get("project_id") or f"path:{project.root}"
        return "postgres", f"{ns}@{url}"
    return "sqlite", str(Path(project.root) / config.jobs_dirname / "jobs.sqlite3")


@overload
def open_store(project: Project, config: JobsConfig, *, create: Literal[True]) -> JobStore: ...
@overload
def open_store(project: Project, config: JobsConfig, *, create: bool) -> JobStore | None: ...
def open_store(project: Project, config: JobsConfig, *, create: bool) -> JobStore | None:
    """The project's store; with ``create=False`` a read-only handle, or None when
    the project never stored a job (nothing is created by a read)."""
    backend, where = store_location(project, config)
    if backend == "postgres":
        url = database_url(config)
        assert url is not None  # store_location said postgres
        return postgres_opener()(url, project, create=create)
    from nw.jobs.stores.sqlite import SqliteJobStore

    if not create and not Path(where).exists():
        return None
    return SqliteJobStore(where, read_only=not create)


_SHARED: dict[tuple[str, str], JobStore] = {}
_SHARED_LOCK = threading.Lock()


@overload
def shared_store(project: Project, config: JobsConfig, *, create: Literal[True]) -> JobStore: ...
@overload
def shared_store(project: Project, config: JobsConfig, *, create: bool) -> JobStore | None: ...
def shared_store(project: Project, config: JobsConfig, *, create: bool) -> JobStore | None:
    """This process's one writable handle on the project's store (kept open:
    the facade's hot paths must not pay a connection per call). With
    ``create=False`` it is None when the project has no store yet."""
    key = store_location(project, config)
    with _SHARED_LOCK:
        store = _SHARED.get(key)
        if store is not None and not (create and store.read_only):
            return store
        if not create and not _exists(project, config):
            return None
        kept, store = store, _open_writable(project, config, create=create)
        if store is None:
            return None
        _SHARED[store_location(project, config)] = store
        if kept is not None:  # a read-only handle, replaced by a writable one
            kept.close()
        return store


def _exists(project: Project, config: JobsConfig) -> bool:
    backend, where = store_location(project, config)
    if backend == "postgres":  # a project without an id never stored a job
        return bool(project.read_meta().get("project_id"))
    return Path(where).exists()


def _open_writable(project: Project, config: JobsConfig, *, create: bool) -> JobStore | None:
    backend, where = store_location(project, config)
    if backend == "postgres":
        # Writable, but a read path (create=False) never migrates nor makes an id.
        url = database_url(config)
        assert url is not None  # store_location said postgres
        return postgres_opener()(url, project, create=create, read_only=False)
    from nw.jobs.stores.sqlite import SqliteJobStore

    if not create and not _writable(Path(where)):
        # A folder this process may only read (another user's project, a read-only
        # mount): reads answer from a read-only handle, and nothing is reaped.
        return SqliteJobStore(where, read_only=True)
    return SqliteJobStore(where)


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def close_shared_stores() -> None:
    """Drop every kept handle (tests; a process that is done with its projects)."""
    with _SHARED_LOCK:
        stores = list(_SHARED.values())
        _SHARED.clear()
    for store in stores:
        with contextlib.suppress(Exception):
            store.close()
