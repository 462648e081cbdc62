"""``enqueue``: validate, quote and gate, write the record, launch an
in-process body; nothing is written before every check has passed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from au import ComputationStatus
from au.base import ComputationBackend

from nw.errors import InvalidValue, UnknownKind
from nw.jobs import costing, credentials, eta, ids, kinds, limits, recovery
from nw.jobs.body import Launch
from nw.jobs.checks import _actor, _check_not_before, _check_priority
from nw.jobs.costing import quote_for
from nw.jobs.handles import ProjectLike, _runtime
from nw.jobs.model import (
    ACTIVE_STATUSES,
    DEFAULT_CONFIG,
    RUNNER_INPROC,
    RUNNER_WORKER,
    Job,
    JobsConfig,
)
from nw.jobs.reads import _worker
from nw.jobs.records import JobRow, new_record, to_job
from nw.jobs.runtime import Runtime
from nw.jobs.stores import shared_store
from nw.jobs.stores.base import JobStore
from nw.project import as_project


def enqueue(
    project: ProjectLike,
    kind: str,
    params: Mapping[str, Any],
    *,
    on_event: Callable[[Any], None] | None = None,
    dispatch: Mapping[str, Callable] | None = None,
    backend: ComputationBackend | None = None,
    idempotency_key: str | None = None,
    label: str | None = None,
    capture_context: Callable[[], AbstractContextManager[Any]] | None = None,
    secrets: Mapping[str, str] | None = None,
    actor: str | Mapping[str, str] | None = None,
    approved: bool = False,
    priority: int = 0,
    not_before: float | datetime | None = None,
    limit_key: str | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Job:
    """Enqueue a render as a background job; returns at once with the job.

    ``priority``: higher is started first (FIFO within a priority, turns
    rotating across actors). ``not_before`` (epoch seconds or an aware
    datetime): queued, but not started before then. ``limit_key``: the key this
    job counts against (default: its kind's ``limit_key``); a limit set on it
    (``set_limit``) holds the job queued while the key is full. All three hold
    for in-process bodies too.

    The body runs on this process's bounded pool when ``dispatch`` has the
    kind, else in a worker process when the kind is registered. It reports
    progress with ``on_event({"stage_index": i, "stage_count": n})``, where
    ``i`` is the number of stages finished (the 0-based index of the stage now
    starting). A fal key bound where this is called
    (``falaw.using_fal_credentials``) is bound around an in-process body too,
    and an explicit ``secrets["fal"]`` inside it. A live job
    with the same idempotency key is returned instead of a second one.

    With ``params["plan"]`` the job's key is the plan's ``nw.plans.plan_hash``
    and its ``cost.estimated_usd`` is the plan re-quoted at today's rates (a
    caller's ``params["estimated_usd"]`` is ignored). A live ``falaw.Plan``
    is accepted and stored (and handed to the body) as its ``plan_to_dict``
    form, which has the same hash.

    Raises, in every case before anything is written, ``InvalidInput`` for the
    caller's mistakes: ``InvalidType`` (a ``TypeError``: params not JSON-able,
    naming the key), ``UnknownKind`` (a ``KeyError``), ``InvalidValue`` (a
    ``ValueError``: malformed ``units``), ``PlanError`` (a plan that cannot be
    identified: ``NonCanonicalPlan`` when a value in it has no canonical form);
    and ``BudgetExceeded`` (over ``config.budget_usd``, or an unknown cost under
    a cap without ``approved=True``). ``JobStoreError`` when the store fails.
    """
    proj = as_project(project)
    if not isinstance(kind, str) or not kind:
        raise UnknownKind(f"kind must be a non-empty string, got {kind!r}")
    who = _actor(actor)  # checked before the runtime or the store is started
    priority = _check_priority(priority)
    due = _check_not_before(not_before)
    params = ids.check_json_params(costing.with_plan_dict(params))
    units = ids.check_units(params)
    fn = dispatch.get(kind) if dispatch else None
    spec = kinds.kind_spec(kind)
    if fn is None and spec is None:
        known = sorted(set(dispatch or ()) | set(kinds.registered_kinds()))
        raise UnknownKind(f"unknown kind {kind!r}; known kinds: {', '.join(known) or 'none'}")
    if backend is not None:
        raise NotImplementedError("a custom backend is not supported; use JobsConfig")
    key = (
        limits.check_key(limit_key)
        if limit_key is not None
        else limits.key_for(spec.limit_key if spec else None, kind, params)
    )
    quote = quote_for(proj, kind, params, config)
    basis = idempotency_key if idempotency_key is not None else quote.identity
    if not isinstance(basis, str) or not basis:
        raise InvalidValue("idempotency_key must be a non-empty string")
    job_id = ids.job_id_for(proj.project_id, kind, basis)
    # Refused before any store is created or opened for writing; checked again
    # inside the create transaction (``admit``), where concurrent enqueues serialise.
    now = config.clock()
    existing = shared_store(proj, config, create=False)
    quote.gate(existing, approved=approved, config=config, job_id=job_id)
    quote.gate_actor(existing, who, approved=approved, config=config, job_id=job_id, now=now)
    rt = _runtime(proj, config) if fn is not None else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    plan = eta.eta_plan(params, units, config)
    samples = store.samples(eta.sample_keys(plan), window=config.sample_window_k)
    prediction = eta.prediction_fields(plan, samples, config)
    # Retries are the worker tier's: a requeued job is claimed by a worker, and
    # an in-process body's callable lives only in the process that enqueued it.
    retryable = bool(fn is None and spec and spec.retryable)
    max_attempts = spec.max_attempts if spec and spec.max_attempts else config.max_attempts
    record = new_record(
        job_id=job_id,
        kind=kind,
        label=label or _label(kind, params),
        idempotency_key=basis,
        params=params,
        now=config.clock(),
        plan=plan,
        prediction=prediction,
        estimated_usd=quote.estimated_usd,
        runner=RUNNER_INPROC if fn is not None else RUNNER_WORKER,
        max_attempts=max_attempts if retryable else 1,
        actor=who,
        retryable=retryable,
        runner_id=rt.runner_id if rt is not None else None,  # who owns an in-process job
    )
    record.update(limit_key=key, priority=priority, not_before=due)
    admit = None
    if config.budget_usd is not None or (config.actor_budget_usd is not None and who):

        def admit() -> None:
            quote.gate(store, approved=approved, config=config, job_id=job_id)
            quote.gate_actor(store, who, approved=approved, config=config, job_id=job_id, now=now)

    # Called before anything is written: a hook that fails leaves no job behind.
    capture = capture_context() if (capture_context is not None and fn is not None) else None
    # The caller's fal key, read on its thread: the body's pool thread cannot see it.
    ambient = credentials.ambient_fal_key() if fn is not None else None
    row, created = store.create(record, claimable=fn is None, admit=admit)
    if not created and _dead_duplicate(store, row, rt, config):
        row, created = store.create(record, claimable=fn is None, admit=admit)
    if created and rt is not None:
        held = dict(secrets or {})
        if ambient and credentials.FAL not in held:
            held[credentials.FAL] = ambient  # so it is redacted like any secret
        launch = Launch(
            fn=fn,
            project=proj,
            on_event=on_event,
            capture=credentials.around_body(ambient, secrets, capture),
            secrets=held,
        )
        try:
            rt.submit(job_id, launch, priority=priority, not_before=due)
        except BaseException as exc:  # e.g. the runtime is shutting down
            _fail_unlaunched(store, row, exc, config)
            raise
    worker = None if created else _worker(store, row)
    return to_job(row, config.clock(), config, worker)


def _label(kind: str, params: Mapping[str, Any]) -> str:
    title = params.get("title") or params.get("label")
    return str(title) if title else kind


def _dead_duplicate(store: JobStore, row: JobRow, rt: Runtime | None, config: JobsConfig) -> bool:
    """A resubmit found a live job: is it really alive? A job whose worker died
    is closed now (the same rule as on read), so the resubmit runs again."""
    holds = rt.holds if rt is not None else (lambda _id: False)
    fresh = recovery.maybe_reap(store, row, config.clock(), config, holds)
    return fresh.status not in ACTIVE_STATUSES


def _fail_unlaunched(store: JobStore, row: JobRow, exc: BaseException, config: JobsConfig) -> None:
    message = f"could not start the job in this process: {type(exc).__name__}: {exc}"
    store.finish(
        row.record["job_id"],
        au_status=ComputationStatus.FAILED,
        result=None,
        error=message,
        fields={"finished_at": config.clock(), "error": message, "error_kind": "crashed"},
        attempt=row.record.get("attempt"),
    )
