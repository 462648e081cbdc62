"""``retry_pipeline`` (and ``retry_job`` of a pipeline's step): new runs of
the steps that did not succeed, re-linked to their upstreams in one
``create_many``; what succeeded is neither run nor paid again."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from nw.errors import InvalidValue
from nw.jobs.api import budgets
from nw.jobs.api.console import new_runs
from nw.jobs.api.handles import ProjectLike, writer
from nw.jobs.api.launching import body_launch
from nw.jobs.api.pipelines import get_pipeline
from nw.jobs.core.model import DEFAULT_CONFIG, Job, JobsConfig
from nw.jobs.core.pipelines import AFTER_FIELD, PIPELINE_FIELD, STEP_FIELD, Edge, Pipeline
from nw.jobs.core.records import JobRow, to_job
from nw.jobs.stores import shared_store
from nw.jobs.stores.pipelines import Links, pipelines_of
from nw.project import Project, as_project


def retry_pipeline(
    project: ProjectLike,
    pipeline_id: str,
    *,
    steps: Sequence[str] | None = None,
    approved: bool = False,
    dispatch: Mapping[str, Callable] | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Pipeline | None:
    """Run again what did not succeed: the failed and cancelled steps (or, with
    ``steps``, those among the named steps and the steps below them) as new
    runs (``retry_job``'s), through the stored budgets as a whole; succeeded
    steps are not run again (their results are the new runs' ``inputs``), live
    ones are left alone. A step whose upstreams have all succeeded is
    claimable at once, the others wait as before. ``dispatch``: the steps whose
    kind it has run in this process (the in-process tier, as
    ``enqueue_pipeline``'s); without it, a step that ran in-process is run
    again by workers when its kind is registered for them, else refused.
    None when unknown."""
    proj = as_project(project)
    got = get_pipeline(proj, pipeline_id, config=config)
    if got is None:
        return None
    if not _retry(proj, got, steps, approved=approved, dispatch=dispatch, config=config):
        return got
    return get_pipeline(proj, pipeline_id, config=config)


def _retry(
    proj: Project,
    got: Pipeline,
    steps: Sequence[str] | None,
    *,
    approved: bool,
    dispatch: Mapping[str, Callable] | None = None,
    config: JobsConfig,
) -> bool:
    """``retry_pipeline``'s writes over the pipeline as read (``got``): whether
    any step runs again."""
    chosen = _below(got, steps)
    redo = [
        s for s in got.steps if s.name in chosen and s.job.status.value in ("failed", "cancelled")
    ]
    if not redo:
        return False
    here = {s.name: fn for s in redo if (fn := (dispatch or {}).get(s.job.kind)) is not None}
    launches = {name: body_launch(proj, fn) for name, fn in here.items()}  # the caller's thread
    rt = writer(proj, config) if launches else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    by_name = {s.name: s for s in got.steps}
    now = config.clock()
    rows = store.get_many([s.job.job_id for s in redo])  # one query
    owners = [rt.runner_id if rt is not None and s.name in here else None for s in redo]
    runs = new_runs(proj, store, [rows[s.job.job_id] for s in redo], config, owners=owners)
    records, quotes = [record for record, _ in runs], [quote for _, quote in runs]
    for s, record in zip(redo, records, strict=True):
        for name in (PIPELINE_FIELD, STEP_FIELD, AFTER_FIELD):
            record[name] = rows[s.job.job_id].record.get(name)
    roots = [all(by_name[u].job.status.value == "succeeded" for u in s.after) for s in redo]
    for record, root in zip(records, roots, strict=True):
        if root and record.get(AFTER_FIELD):
            record["released_at"] = now  # its upstreams succeeded before: free at once
    waiting = [s.job.job_id for s, root in zip(redo, roots, strict=True) if not root]
    edges = [
        Edge(by_name[u].job.job_id, s.job.job_id, u, u in s.allow_failure)
        for s in redo
        for u in s.after
    ]
    admit = budgets.admit_batch(
        None,
        store,
        quotes,
        [budgets.who_of(s.job.actor, s.job.kind) for s in redo],
        [f"step {s.name!r}" for s in redo],
        approved=approved,
        config=config,
        now=now,
    )
    links = Links(pipeline=None, steps=(), edges=edges, waiting=waiting, now=now)
    linker = pipelines_of(store).linker(links)
    claimable = [root and s.name not in here for s, root in zip(redo, roots, strict=True)]
    made = store.create_many(records, claimable=claimable, admit=admit, also=linker)
    if rt is not None:
        held = [
            (row, launches[s.name])
            for s, (row, created) in zip(redo, made, strict=True)
            if created and s.name in launches
        ]
        rt.take_all(held)
    if links.released:
        store.wake_workers()
    return True


def retry_steps(
    proj: Project, pipeline_id: str, steps: Sequence[str], *, approved: bool, config: JobsConfig
) -> None:
    """``retry_pipeline``'s writes for these steps (and those below them), the
    pipeline read once and nothing read back: ``retry_job`` and
    ``retry_jobs`` of a pipeline's steps read back what they return."""
    got = get_pipeline(proj, pipeline_id, config=config)
    if got is not None:
        _retry(proj, got, steps, approved=approved, config=config)


def retry_step(proj: Project, row: JobRow, *, approved: bool, config: JobsConfig) -> Job:
    """``retry_job`` of a pipeline's failed or cancelled step: it and the steps
    below it that did not succeed run again (``retry_pipeline``'s writes; only
    the step is read back)."""
    pipeline_id, step = str(row.record["pipeline_id"]), str(row.record.get("step"))
    retry_steps(proj, pipeline_id, [step], approved=approved, config=config)
    store = shared_store(proj, config, create=True)
    fresh = store.get(row.record["job_id"]) or row
    return to_job(fresh, config.clock(), config)


def _below(got: Pipeline, names: Sequence[str] | None) -> set[str]:
    """The named steps and every step below them (all steps when None)."""
    every = {s.name for s in got.steps}
    if names is None:
        return every
    unknown = [n for n in names if n not in every]
    if unknown:
        raise InvalidValue(f"pipeline {got.pipeline_id} has no step {unknown[0]!r}")
    chosen = set(names)
    changed = True
    while changed:
        changed = False
        for s in got.steps:
            if s.name not in chosen and any(u in chosen for u in s.after):
                chosen.add(s.name)
                changed = True
    return chosen
