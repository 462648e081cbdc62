"""What an endpoint reads from ``request.app.state``, and how a request names a job.

``create_app`` puts the served ``projects``, the ``config``, the streams'
``poll_interval_s`` and ``stream_max_s`` and the ``closing`` event on the
app's state; endpoints are plain functions of the request that read them
through these helpers, so any one of them can be called alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from nw.jobs.api import facade
from nw.jobs.core.ids import check_job_id
from nw.jobs.core.model import Job, JobsConfig
from nw.jobs.core.records import to_dict
from nw.project import Project, ProjectError, as_project


class Projects:
    """The projects this app serves, and how a request names one."""

    def __init__(self, projects: Iterable[Project | str | os.PathLike[str]]):
        self.all: list[Project] = [as_project(p) for p in projects]
        if not self.all:
            raise ProjectError("create_app needs at least one project")

    def pick(self, name: str | None) -> list[Project]:
        """All projects, or the one whose path, folder name or title is ``name``."""
        if not name:
            return self.all
        for project in self.all:
            if name in (str(project.root), project.root.name, project.title):
                return [project]
        raise HTTPException(404, f"no project {name!r} is served here")

    def one(self, name: str | None) -> Project:
        picked = self.pick(name)
        if len(picked) > 1:
            raise HTTPException(400, "several projects are served; say which with 'project'")
        return picked[0]

    def describe(self) -> list[dict[str, str]]:
        return [{"root": str(p.root), "name": p.root.name, "title": p.title} for p in self.all]


def projects(request: Request) -> Projects:
    return request.app.state.projects


def config(request: Request) -> JobsConfig:
    return request.app.state.config


def job_json(job: Job, project: Project) -> dict[str, Any]:
    return {**to_dict(job), "project": str(project.root)}


def found_job(request: Request, job_id: str) -> tuple[Project, Job]:
    """The served project that holds ``job_id`` and the job (400 malformed, 404 unknown)."""
    check_job_id(job_id)
    for project in projects(request).all:
        job = facade.get_job(project, job_id, config=config(request))
        if job is not None:
            return project, job
    raise HTTPException(404, f"no job {job_id}")
