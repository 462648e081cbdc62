"""``set_limit`` and ``list_limits``: the limits every worker honours, kept
in the store (the pure rules are ``nw.jobs.core.limits``)."""

from __future__ import annotations

from typing import Any

from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.core import limits
from nw.jobs.core.model import (
    DEFAULT_CONFIG,
    JobsConfig,
)
from nw.jobs.stores import shared_store
from nw.project import as_project


def set_limit(
    project: ProjectLike,
    key: str,
    *,
    max_running: int | None = None,
    per_second: int | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any] | None:
    """Set the limit of a key where every worker sees it, or remove it (both None).

    ``max_running``: at most that many jobs of the key run at once (0 pauses
    the key); ``per_second``: at most that many start in any one-second window.
    On PostgreSQL the limit is database-wide (every project and host sharing
    the database shares the provider account); on the embedded store it is the
    project's (every worker of the project). Returns the limit as
    ``list_limits`` shows it, or None once removed."""
    key = limits.check_key(key)
    max_running, per_second = limits.check_limit(max_running, per_second)
    store = shared_store(as_project(project), config, create=True)
    store.set_limit(key, max_running=max_running, per_second=per_second, now=config.clock())
    store.wake_workers()  # a raised limit may let queued jobs start now
    return next((lim for lim in list_limits(project, config=config) if lim["key"] == key), None)


def list_limits(project: ProjectLike, *, config: JobsConfig = DEFAULT_CONFIG) -> list[dict]:
    """Every limit the project's workers honour: ``key``, ``max_running``,
    ``per_second``, ``running`` (jobs of the key running now, database-wide on
    PostgreSQL), ``started_last_s``, ``scope`` (``"database"`` or ``"project"``)."""
    store, _ = reader(as_project(project), config)
    if store is None:
        return []
    return [
        {
            "key": lim.key,
            "max_running": lim.max_running,
            "per_second": lim.per_second,
            "running": lim.running,
            "started_last_s": lim.started_last_s,
            "scope": store.limit_scope,
        }
        for lim in store.limits(now=config.clock())
    ]
