"""Webhook URLs of parked jobs (nw/jobs/execution/hooks.py): signed per job and
attempt under the project's secret, made once with mode 0600 in the project."""

from __future__ import annotations

import os
import stat

import nw
from nw.jobs.execution import hooks


def test_a_url_is_signed_per_job_and_attempt_under_the_project_s_own_secret(tmp_path, monkeypatch):
    monkeypatch.setenv(hooks.PUBLIC_URL_ENV, "https://jobs.example.com/")
    monkeypatch.delenv(hooks.SECRET_ENV, raising=False)
    project = nw.Project.init(tmp_path / "proj", title="p")
    url = hooks.url_for(project, "abc", 2)
    assert url is not None and url.startswith("https://jobs.example.com/hooks/abc/2/")
    sig = url.rsplit("/", 1)[1]
    secret = project.root / ".nw" / hooks.SECRET_FILE
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    # a path names the same project (and the same secret) as the Project
    assert hooks.url_for(str(project.root), "abc", 2) == url
    assert hooks.verify(project.root, "abc", 2, sig)
    assert not hooks.verify(project, "abc", 3, sig)  # another attempt
    assert not hooks.verify(project, "abd", 2, sig)  # another job
    other = nw.Project.init(tmp_path / "other", title="o")
    assert not hooks.verify(other, "abc", 2, sig)  # another project's secret


def test_the_environment_s_secret_wins_and_no_public_base_means_no_url(tmp_path, monkeypatch):
    project = nw.Project.init(tmp_path / "proj", title="p")
    monkeypatch.delenv(hooks.PUBLIC_URL_ENV, raising=False)
    assert hooks.url_for(project, "abc", 1) is None
    monkeypatch.setenv(hooks.SECRET_ENV, "shared-secret")
    a = hooks.signature(project, "abc", 1)
    b = hooks.signature(nw.Project.init(tmp_path / "b", title="b"), "abc", 1)
    assert a == b  # one secret for every host and project that shares it
    assert not (project.root / ".nw" / hooks.SECRET_FILE).exists()


def test_a_project_whose_secret_cannot_be_read_gets_no_url(tmp_path, monkeypatch):
    monkeypatch.setenv(hooks.PUBLIC_URL_ENV, "https://jobs.example.com")
    monkeypatch.delenv(hooks.SECRET_ENV, raising=False)
    project = nw.Project.init(tmp_path / "proj", title="p")
    (project.root / ".nw" / hooks.SECRET_FILE).mkdir()  # unreadable as a file, even by root
    assert hooks.url_for(project, "abc", 1) is None  # polls resume such a job
