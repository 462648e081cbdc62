"""Pipelines: steps that wait on each other, quoted, timed, cancelled and
resumed as a whole (``enqueue_pipeline``, ``estimate_pipeline``,
``get_pipeline``, ``cancel_pipeline``; ``retry_pipeline`` is
``pipeline_retry``'s, and ``enqueue(..., after=[job ids])``, one job that waits
on others, ``enqueue_after``'s).

Everything is decided before anything is written: the steps (names, kinds,
``after``, no cycle), each step's quote and the pipeline's sum, the budgets
and approval over it once. Then one ``create_many`` transaction writes every
step's job, the pipeline's row and its edges (``also``): the steps that come
after nothing are claimable at once, the others wait with no due time. The
store releases and cancels them in the transaction that ends an upstream
(``nw.jobs.stores.pipelines``): no process of the caller's is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nw.jobs.api import budgets, costing, tracing
from nw.jobs.api.enqueueing import BatchMemo, prepare_item, record_of
from nw.jobs.api.handles import ProjectLike, reader, writer
from nw.jobs.api.launching import body_launch
from nw.jobs.api.reads import queue_waits, read_job, reap_rows
from nw.jobs.core import eta
from nw.jobs.core.checks import check_actor, check_label, named
from nw.jobs.core.model import DEFAULT_CONFIG, TERMINAL_STATUSES, Job, JobsConfig
from nw.jobs.core.pipelines import (
    AFTER_FIELD,
    PIPELINE_FIELD,
    STEP_FIELD,
    Edge,
    Pipeline,
    PipelineStep,
    critical_eta,
    order,
    pipeline_id_of,
    read_steps,
    spec_hash,
    status_of,
)
from nw.jobs.core.records import JobRow, waits_on_upstreams
from nw.jobs.execution.runtime import Runtime
from nw.jobs.stores import shared_store
from nw.jobs.stores.base import JobStore
from nw.jobs.stores.pipelines import Links, pipelines_of
from nw.project import Project, as_project


class _Plan:
    """A pipeline checked and quoted, nothing written yet."""

    def __init__(
        self,
        proj: Project,
        steps: Any,
        *,
        label: Any,
        actor: Any,
        dispatch: Mapping[str, Callable] | None,
        config: JobsConfig,
    ):
        self.spec = read_steps(steps)
        self.order = order(self.spec)
        self.label = check_label(label)
        self.actor = check_actor(actor)
        self.pipeline_id = pipeline_id_of(spec_hash(proj.project_id, self.spec))
        self.items: dict[str, Any] = {}
        # the steps are one batch: kinds, policies, predictions and the trace once
        self.memo = BatchMemo(traced=tracing.carrier())
        for name in self.order:
            fields = self.spec[name].fields
            try:
                self.items[name] = prepare_item(
                    proj,
                    fields.get("kind"),
                    {} if fields.get("params") is None else fields.get("params"),
                    dispatch=dispatch,
                    idempotency_key=f"{self.pipeline_id}/{name}",
                    label=fields.get("label"),
                    actor=self.actor,
                    priority=fields.get("priority") or 0,
                    not_before=fields.get("not_before"),
                    limit_key=fields.get("limit_key"),
                    config=config,
                    memo=self.memo,
                )
            except Exception as exc:
                raise named(exc, f"step {name!r}") from None
        self.job_ids = {name: item.job_id for name, item in self.items.items()}
        self.quotes = [self.items[name].quote for name in self.order]
        known = [q.estimated_usd for q in self.quotes if q.estimated_usd is not None]
        unknown = [n for n in self.order if self.items[n].quote.estimated_usd is None]
        self.quote: dict[str, Any] = {
            "estimated_usd": round(sum(known), 6),
            "lower_bound": bool(unknown),
            "unknown_steps": unknown,
        }

    def total(self) -> costing.Quote:
        """The whole pipeline as one quote (unknown when any step's is)."""
        unknown = bool(self.quote["unknown_steps"])
        return costing.Quote(
            identity=self.pipeline_id,
            estimated_usd=None if unknown else self.quote["estimated_usd"],
            has_unknown_costs=unknown or any(q.has_unknown_costs for q in self.quotes),
        )

    def doc(self) -> dict[str, Any]:
        steps = {
            name: {
                "kind": self.items[name].kind,
                "job_id": self.job_ids[name],
                "after": [up for up, _ in self.spec[name].after],
                "allow_failure": [up for up, allow in self.spec[name].after if allow],
            }
            for name in self.order
        }
        return {
            "label": self.label,
            "actor": self.actor,
            "order": self.order,
            "steps": steps,
            "quote": self.quote,
        }


def estimate_pipeline(
    project: ProjectLike,
    steps: Mapping[str, Any],
    *,
    dispatch: Mapping[str, Callable] | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """What ``enqueue_pipeline`` would quote, without enqueueing: the sum of the
    steps' quotes (``estimated_usd``, a lower bound when any step's cost is
    unknown: ``lower_bound``, ``unknown_steps``), each step's, whether it needs
    approval, and the ETA of the whole from learned durations. Refuses what
    ``enqueue_pipeline`` refuses (a cycle, an unknown step or kind)."""
    proj = as_project(project)
    plan = _Plan(proj, steps, label=None, actor=None, dispatch=dispatch, config=config)
    total = plan.total()
    store = shared_store(proj, config, create=False)
    policy = budgets.policy_of(store)  # the stored threshold, as ``estimate`` reads it
    needs = policy.requires_approval(total.estimated_usd, config)
    predicted: dict[str, float | None] = {}
    priors: list[str] = []
    eplans, samples = _learned(plan, store, config)
    for name, eplan in zip(plan.order, eplans, strict=True):
        fields = eta.prediction_fields(eplan, samples, config)
        predicted[name] = fields.get("eta_p50")
        if fields.get("eta_confidence") in (None, "prior"):
            priors.append(name)  # no duration learned yet: the kind's prior
    after = {name: [up for up, _ in plan.spec[name].after] for name in plan.order}
    per_step, whole = critical_eta(after, predicted, dict.fromkeys(plan.order, "queued"))
    return {
        "pipeline_id": plan.pipeline_id,
        **plan.quote,
        "requires_approval": needs,
        "eta_s": whole,
        "eta_confidence": None if whole is None else ("prior" if priors else "learned"),
        "steps": {
            name: {
                "kind": plan.items[name].kind,
                "estimated_usd": plan.items[name].quote.estimated_usd,
                "eta_s": per_step.get(name),
            }
            for name in plan.order
        },
    }


def enqueue_pipeline(
    project: ProjectLike,
    steps: Mapping[str, Any],
    *,
    label: str | None = None,
    actor: str | Mapping[str, str] | None = None,
    approved: bool = False,
    dispatch: Mapping[str, Callable] | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Pipeline:
    """Enqueue a pipeline: ``steps`` maps a step name to ``{"kind", "params",
    "after": [names]}`` (and optionally ``label``, ``idempotency_key``,
    ``priority``, ``limit_key``, ``not_before`` as ``enqueue`` takes them); an
    ``after`` entry ``{"step": name, "allow_failure": True}`` runs the step even
    when that one fails. A step starts once every step it comes after has
    succeeded; a body that declares ``inputs`` receives ``{step: result}`` of
    those steps. A step runs on worker processes (a registered kind), or in
    this process when ``dispatch`` has its kind (the in-process tier, as
    ``enqueue``'s): such a step waits for its upstreams without holding a pool
    thread, and ends orphaned if this process dies first.

    All or nothing, decided before anything is written: a cycle, an unknown
    step name or kind, a refused param is ``InvalidInput`` naming the step;
    the sum of the steps' quotes is gated once against the config caps, the
    stored budgets and the approval policy (``BudgetExceeded`` /
    ``ApprovalRequired``). Then one transaction writes every step.
    Re-submitting the same steps (same kinds, params and order) returns the
    existing pipeline (``created`` False) and pays nothing again."""
    proj = as_project(project)
    plan = _Plan(proj, steps, label=label, actor=actor, dispatch=dispatch, config=config)
    existing = shared_store(proj, config, create=False)
    if existing is not None and pipelines_of(existing).pipeline(plan.pipeline_id) is not None:
        found = get_pipeline(proj, plan.pipeline_id, config=config)
        assert found is not None
        return found
    now = config.clock()
    names = [f"step {name!r}" for name in plan.order]
    actors = [plan.actor] * len(plan.order)
    total = plan.total()

    def gate(positions: list[int], store: JobStore | None) -> None:
        costing.gate_batch(
            [plan.quotes[k] for k in positions],
            store,
            approved=approved,
            config=config,
            now=now,
            actors=[actors[k] for k in positions],
            names=[names[k] for k in positions],
        )

    capped = config.budget_usd is not None or config.actor_budget_usd is not None
    if capped:  # before any store is created or opened for writing
        gate(list(range(len(plan.order))), existing)
    budgets.check_approval(
        [total], budgets.policy_of(existing), config, approved=approved, names=["pipeline"]
    )
    here = {n: plan.items[n].fn for n in plan.order if plan.items[n].fn is not None}
    launches = {n: body_launch(proj, fn) for n, fn in here.items()}  # on the caller's thread
    rt = writer(proj, config) if launches else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    records = _records(plan, store, rt, config)
    roots = [not plan.spec[name].after for name in plan.order]
    policy = budgets.policy_of(store)

    def admit(positions: list[int]) -> None:
        budgets.check_approval([total], policy, config, approved=approved, names=["pipeline"])
        if capped:
            gate(positions, store)

    admit_all = budgets.admit_batch(
        admit,
        store,
        plan.quotes,
        [budgets.who_of(plan.actor, plan.items[n].kind) for n in plan.order],
        names,
        approved=approved,
        config=config,
        now=now,
    )
    edges = _edges(plan)
    row = {
        "pipeline_id": plan.pipeline_id,
        "created_at": now,
        "label": plan.label,
        "actor_id": plan.actor["id"] if plan.actor else None,
        "doc": plan.doc(),
    }
    links = Links(
        pipeline=row,
        steps=[(name, plan.job_ids[name]) for name in plan.order],
        edges=edges,
        waiting=[plan.job_ids[n] for n, root in zip(plan.order, roots, strict=True) if not root],
        now=now,
    )
    claimable = [root and name not in here for name, root in zip(plan.order, roots, strict=True)]
    also = pipelines_of(store).linker(links)
    made = store.create_many(records, claimable=claimable, admit=admit_all, also=also)
    if rt is not None:  # a step the runtime cannot take is ended (unlaunched), the rest held
        held = [
            (row_, launches[name])
            for name, (row_, created) in zip(plan.order, made, strict=True)
            if created and name in launches
        ]
        rt.take_all(held)
    if links.released:
        store.wake_workers()
    got = get_pipeline(proj, plan.pipeline_id, config=config)
    assert got is not None
    return Pipeline(**{**got.__dict__, "created": True})


def _records(
    plan: _Plan, store: JobStore, rt: Runtime | None, config: JobsConfig
) -> list[dict[str, Any]]:
    """Each step's queued record, tied to the pipeline (``pipeline_id``, ``step``,
    ``after``: the upstream jobs and their step names)."""
    items = [plan.items[name] for name in plan.order]
    eplans, samples = _learned(plan, store, config)
    out = []
    for name, item, eplan in zip(plan.order, items, eplans, strict=True):
        record = record_of(item, eplan, samples, rt, config, plan.memo)
        record[PIPELINE_FIELD] = plan.pipeline_id
        record[STEP_FIELD] = name
        record[AFTER_FIELD] = [
            {"job_id": plan.job_ids[up], "step": up, "allow_failure": allow}
            for up, allow in plan.spec[name].after
        ]
        out.append(record)
    return out


def _learned(
    plan: _Plan, store: JobStore | None, config: JobsConfig
) -> tuple[list[eta.EtaPlan], dict[str, list[float]]]:
    """Each step's ETA plan, in order, and the durations learned for all of
    them, read in one query (none without a store)."""
    items = [plan.items[name] for name in plan.order]
    eplans = [eta.eta_plan(item.params, item.units, config) for item in items]
    keys = list(dict.fromkeys(k for p in eplans for k in eta.sample_keys(p)))
    samples = store.samples(keys, window=config.sample_window_k) if store and keys else {}
    return eplans, samples


def _edges(plan: _Plan) -> list[Edge]:
    return [
        Edge(plan.job_ids[up], plan.job_ids[name], up, allow)
        for name in plan.order
        for up, allow in plan.spec[name].after
    ]


# ----- reading, cancelling ---------------------------------------------------------------
def get_pipeline(
    project: ProjectLike, pipeline_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> Pipeline | None:
    """A pipeline as it stands (``Pipeline``), or None when the project has none
    by that id."""
    if not isinstance(pipeline_id, str) or not pipeline_id.startswith("pl-"):
        return None
    proj = as_project(project)
    store, rt = reader(proj, config)
    if store is None:
        return None
    found = pipelines_of(store).pipeline(pipeline_id)
    if found is None:
        return None
    doc = found["doc"]
    steps_of = pipelines_of(store).steps(pipeline_id)
    ids = [job_id for _, job_id in steps_of]
    ids_of = dict(steps_of)
    found_rows = store.get_many(ids)  # one query
    # a step whose process is gone is reaped as get_job reaps; its end may have
    # stopped the steps after it (in the same transaction): read them again
    reaped, workers = reap_rows(store, rt, list(found_rows.values()), config)
    if reaped:
        found_rows = store.get_many(ids)
    now = config.clock()
    rows: dict[str, JobRow] = {n: found_rows[j] for n, j in steps_of if j in found_rows}
    names = [n for n in doc.get("order", sorted(rows)) if n in rows]
    # each step read as get_job reads it (its worker, a kept outcome, its
    # progress floor); the waits of those free to start from one replay of the
    # queue (one still waiting on its upstreams is timed by the critical path)
    free = [row for row in rows.values() if not waits_on_upstreams(row.record)]
    waits = queue_waits(store, free, config) if free else {}
    jobs = {
        name: read_job(store, rows[name], rt, config, workers, waits.get(ids_of[name]))
        for name in names
    }
    states = {name: jobs[name].status.value for name in names}
    spec = doc.get("steps", {})
    after = {name: [u for u in spec.get(name, {}).get("after", []) if u in rows] for name in names}
    remaining = {name: _remaining(jobs[name]) for name in names}
    per_step, whole = critical_eta(after, remaining, states)
    priors = [
        n
        for n in names
        if states[n] not in TERMINAL_STATUSES and jobs[n].confidence in (None, "prior")
    ]
    steps = [
        PipelineStep(
            name,
            _waiting(jobs[name], after[name], states),
            after[name],
            list(spec.get(name, {}).get("allow_failure", [])),
            per_step.get(name),
        )
        for name in names
    ]
    ended = sum(1 for s in states.values() if s in TERMINAL_STATUSES)
    actual = sum(_spent(j) for j in jobs.values())
    status = status_of(list(states.values()))
    return Pipeline(
        pipeline_id=pipeline_id,
        label=found.get("label"),
        actor=doc.get("actor"),
        created_at=float(found["created_at"]),
        status=status,
        steps=steps,
        pct=round(100.0 * ended / len(names), 1) if names else 100.0,
        quote=dict(doc.get("quote") or {}),
        actual_usd=round(actual, 6),
        eta_s=0.0 if status in TERMINAL_STATUSES else whole,
        eta_ts=None if (whole is None or status in TERMINAL_STATUSES) else now + whole,
        eta_confidence=_confidence(whole, status, priors),
    )


def _confidence(whole: float | None, status: str, priors: list[str]) -> str | None:
    """``learned`` when every live step's duration is, ``prior`` when one is
    only its kind's prior; None when the ETA cannot be said (or it ended)."""
    if whole is None or status in TERMINAL_STATUSES:
        return None
    return "prior" if priors else "learned"


def _remaining(job: Job) -> float | None:
    """Seconds until a live step ends once it may start: a running one's
    remaining time, a queued one's ``eta_s`` (its wait in the queue counted for a
    step free to start; None when that wait cannot be said, as the job reads)."""
    if job.status.value in TERMINAL_STATUSES:
        return 0.0
    if job.status.value == "running":
        return job.remaining_s if job.remaining_s is not None else job.eta_s
    return job.eta_s


def _waiting(job: Job, ups: list[str], states: Mapping[str, str]) -> Job:
    """A queued step still waiting on its upstreams says which."""
    if job.status.value != "queued":
        return job
    pending = [u for u in ups if states.get(u) not in ("succeeded",)]
    if not pending:
        return job
    from dataclasses import replace

    return replace(job, waiting=f"waiting: after {', '.join(pending)}")


def _spent(job: Job) -> float:
    return float(job.cost.actual_usd or 0.0)


def cancel_pipeline(
    project: ProjectLike, pipeline_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> Pipeline | None:
    """Cancel every step not finished, as ``cancel_job`` cancels one (a running
    one stops as its outcome says; the queued ones, waiting or not, are
    cancelled at once), in one statement. None when unknown."""
    if not isinstance(pipeline_id, str) or not pipeline_id.startswith("pl-"):
        return None
    proj = as_project(project)
    store, rt = reader(proj, config)
    if store is None or pipelines_of(store).pipeline(pipeline_id) is None:
        return None
    cancelled = pipelines_of(store).cancel(pipeline_id, now=config.clock())
    if rt is not None:  # as cancel_job: a step this process runs, waits on or delays
        for job_id in cancelled:
            rt.local_cancel(job_id)
    return get_pipeline(proj, pipeline_id, config=config)
