"""This process's handles on a project's store and runtime: the write paths
start the runtime, the read paths only look for what already exists."""

from __future__ import annotations

import os

from nw.jobs.core.model import (
    JobsConfig,
)
from nw.jobs.execution.runtime import Runtime
from nw.jobs.execution.runtimes import LocalRuntimes, existing_runtime, runtime_for
from nw.jobs.stores import shared_store, store_location
from nw.jobs.stores.base import JobStore
from nw.project import Project

ProjectLike = Project | str | os.PathLike[str]


def writer(project: Project, config: JobsConfig) -> Runtime:
    key = store_location(project, config)
    return runtime_for(key, lambda: shared_store(project, config, create=True), config)


def reader(project: Project, config: JobsConfig) -> tuple[JobStore | None, LocalRuntimes | None]:
    """This process's handle on the project's store (None if it has none) and
    the runtime when this process runs bodies for it."""
    store = shared_store(project, config, create=False)
    if store is None:
        return None, None
    return store, existing_runtime(store_location(project, config))
