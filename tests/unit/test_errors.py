"""One tree of exceptions: every deliberate error under NwJobsError, the
caller's input apart from the system's faults, the documented built-in bases kept."""

from __future__ import annotations

import inspect

import pytest

import nw
import nw.errors as errors
from nw import plans, pricing, project
from nw.jobs.api import facade
from nw.jobs.core import errors as job_errors
from nw.jobs.core import ids, kinds

DEFINED = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, BaseException) and cls.__module__ == "nw.errors"
]


def test_every_error_nw_defines_is_under_one_root():
    assert len(DEFINED) >= 15
    assert all(issubclass(cls, errors.NwJobsError) for cls in DEFINED)


def test_the_callers_input_and_the_systems_faults_never_overlap():
    callers = {c for c in DEFINED if issubclass(c, errors.InvalidInput)}
    systems = {c for c in DEFINED if issubclass(c, (errors.ConfigError, errors.JobStoreError))}
    assert errors.InvalidJobId in callers and errors.RateTableError in systems
    assert not callers & systems


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (errors.UnknownKind, KeyError),
        (errors.InvalidType, TypeError),
        (errors.InvalidValue, ValueError),
        (errors.InvalidJobId, ValueError),
        (errors.ProjectError, ValueError),
        (errors.PlanError, ValueError),
        (errors.NonCanonicalPlan, TypeError),
        (errors.RateTableError, ValueError),
        (errors.InvalidSetting, ValueError),
        (errors.KindImportError, ImportError),
        (errors.JobStoreError, RuntimeError),
    ],
)
def test_the_documented_builtin_base_is_kept(cls, builtin):
    assert issubclass(cls, builtin)


def test_the_old_homes_still_export_the_same_classes():
    assert ids.InvalidJobId is errors.InvalidJobId
    assert kinds.KindImportError is errors.KindImportError
    assert project.ProjectError is nw.ProjectError is errors.ProjectError
    assert plans.PlanError is errors.PlanError
    assert plans.NonCanonicalPlan is errors.NonCanonicalPlan
    assert pricing.RateTableError is errors.RateTableError
    assert pricing.Unpriceable is errors.Unpriceable
    for name in job_errors.__all__:
        if name != "error_kind_of":
            assert getattr(job_errors, name) is getattr(errors, name)


def test_the_facade_raises_typed_errors_that_old_except_clauses_still_catch(tmp_path):
    where = nw.Project.init(tmp_path / "p")
    with pytest.raises(errors.UnknownKind) as info:
        facade.enqueue(where, "nope", {})
    assert isinstance(info.value, KeyError)
    assert str(info.value).startswith("unknown kind 'nope'; known kinds:")  # not KeyError's quotes
    with pytest.raises(errors.InvalidType, match="params"):
        facade.estimate(where, "k", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidValue, match="unknown status"):
        facade.list_jobs(where, status="nearly")
    with pytest.raises(errors.InvalidValue, match="limit"):
        facade.summarize(where, limit=0)


def test_a_bad_actor_is_refused_before_the_store_exists(tmp_path):
    where = nw.Project.init(tmp_path / "p")
    with pytest.raises(errors.InvalidType, match="actor"):
        facade.enqueue(where, "k", {}, dispatch={"k": print}, actor=42)  # type: ignore[arg-type]
    assert not (where.root / ".nw" / "jobs").exists()
