"""``enqueue(..., after=[job ids])``: one job that waits on jobs already
enqueued, written with its links (nw/jobs/stores/pipelines.py) in one
``create_many``; it starts when they have all succeeded."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from nw.errors import InvalidType, InvalidValue
from nw.jobs.api import budgets, costing
from nw.jobs.api.enqueueing import record_of
from nw.jobs.api.handles import writer
from nw.jobs.api.launching import dead_duplicate
from nw.jobs.core import eta
from nw.jobs.core.checks import could_name_a_job
from nw.jobs.core.model import Job, JobsConfig
from nw.jobs.core.pipelines import AFTER_FIELD, Edge
from nw.jobs.core.records import to_job
from nw.jobs.execution.body import Launch
from nw.jobs.stores import shared_store
from nw.jobs.stores.pipelines import Links, pipelines_of
from nw.project import Project


def check_after(after: Any) -> list[str]:
    """``enqueue``'s ``after``: a list of job ids (one line when it is not)."""
    if isinstance(after, (str, bytes, Mapping)) or not isinstance(after, Sequence):
        raise InvalidType("after must be a list of job ids")
    ids = list(dict.fromkeys(after))
    if not ids:
        raise InvalidValue("after must name at least one job")
    for job_id in ids:
        if not could_name_a_job(job_id):
            raise InvalidValue(f"after names no job of this project: {job_id!r}")
    return ids


def enqueue_after(
    proj: Project,
    item: Any,
    after: list[str],
    *,
    launch: Launch | None,
    approved: bool,
    config: JobsConfig,
) -> Job:
    """``enqueue(..., after=ids)``: ``item`` (prepared by ``enqueue``) written
    waiting on the jobs ``after`` names (their results are its ``inputs``, by
    job id); it starts when they have all succeeded, is cancelled when one
    fails or is cancelled. With ``launch`` (a ``dispatch`` body) this process
    runs it once the store releases it (``Runtime.submit_after``). A job id no
    job of the project has refuses it, nothing written."""
    existing = shared_store(proj, config, create=False)
    found = existing.get_many(after) if existing is not None else {}  # one query
    missing = [j for j in after if j not in found]
    if missing:
        raise InvalidValue(f"after names no job of this project: {missing[0]}")
    now = config.clock()
    if config.budget_usd is not None or config.actor_budget_usd is not None:
        costing.gate_batch(
            [item.quote], existing, approved=approved, config=config, now=now, actors=[item.actor]
        )
    rt = writer(proj, config) if launch is not None else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    eplan = eta.eta_plan(item.params, item.units, config)
    samples = store.samples(eta.sample_keys(eplan), window=config.sample_window_k)
    record = record_of(item, eplan, samples, rt, config)
    record[AFTER_FIELD] = [{"job_id": j, "step": None, "allow_failure": False} for j in after]
    edges = [Edge(j, item.job_id, None) for j in after]
    links = Links(pipeline=None, steps=(), edges=edges, waiting=[item.job_id], now=now)
    base = None
    if config.budget_usd is not None or config.actor_budget_usd is not None:

        def base(positions: list[int]) -> None:
            costing.gate_batch(
                [item.quote], store, approved=approved, config=config, now=now, actors=[item.actor]
            )

    admit = budgets.admit_batch(
        base,
        store,
        [item.quote],
        [budgets.who_of(item.actor, item.kind)],
        ["job"],
        approved=approved,
        config=config,
        now=now,
    )
    [(row, made)] = store.create_many(
        [record], claimable=[False], admit=admit, also=pipelines_of(store).linker(links)
    )
    if not made and dead_duplicate(store, row, rt, config):  # its process died: run again
        links = dataclasses.replace(links, released=[])
        [(row, made)] = store.create_many(
            [record], claimable=[False], admit=admit, also=pipelines_of(store).linker(links)
        )
    if made and rt is not None and launch is not None:
        rt.take(row, launch)
    if links.released:
        store.wake_workers()
    fresh = store.get(item.job_id) if made else row
    return to_job(fresh or row, config.clock(), config)
