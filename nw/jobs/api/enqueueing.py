"""``enqueue``: validate, quote and gate, write the record, launch an
in-process body; nothing is written before every check has passed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from au.base import ComputationBackend

from nw.errors import InvalidType, InvalidValue, UnknownKind
from nw.jobs.api import budgets, costing, launching, tracing
from nw.jobs.api.costing import quote_for
from nw.jobs.api.handles import ProjectLike, writer
from nw.jobs.api.reads import worker_seen
from nw.jobs.core import eta, ids, kinds, limits, outcome
from nw.jobs.core.checks import (
    MAX_KEY_CHARS,
    check_actor,
    check_label,
    check_name,
    check_not_before,
    check_params,
    check_priority,
    derived_label,
    named,
)
from nw.jobs.core.model import (
    DEFAULT_CONFIG,
    RUNNER_INPROC,
    RUNNER_WORKER,
    Job,
    JobsConfig,
)
from nw.jobs.core.records import new_record, to_job
from nw.jobs.execution.runtime import Runtime
from nw.jobs.stores import shared_store
from nw.jobs.stores.base import JobStore
from nw.project import Project, as_project


def _label(kind: str, params: Mapping[str, Any]) -> str:
    title = params.get("title") or params.get("label")
    return derived_label(str(title)) if title else kind


@dataclass
class BatchMemo:
    """What is the same for many items of one batch (``enqueue_many``, a
    pipeline's steps), worked out once for it: a kind's body and
    registration, a kind's retry policy, the prediction of an ETA plan (the
    learned durations are read once per batch), the caller's trace headers,
    and one actor dict per actor (the rows of a batch then share these
    objects, which ``pg_batch`` sends once)."""

    kinds: dict[str, tuple[Callable | None, kinds.KindSpec | None]] = field(default_factory=dict)
    policies: dict[tuple[str, bool], outcome.RetryPolicy] = field(default_factory=dict)
    predictions: dict[eta.EtaPlan, dict[str, Any]] = field(default_factory=dict)
    traced: dict[str, str] | None = None
    actors: dict[tuple[tuple[str, str], ...], dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Item:
    """One enqueue request, validated and quoted; nothing written yet."""

    kind: str
    params: dict[str, Any]
    units: int | None
    fn: Callable | None
    spec: kinds.KindSpec | None
    quote: costing.Quote
    basis: str
    job_id: str
    label: str | None
    actor: dict[str, str] | None
    priority: int
    due: float | None  # not_before, epoch seconds
    limit_key: str | None


def prepare_item(
    proj: Project,
    kind: Any,
    params: Any,
    *,
    dispatch: Mapping[str, Callable] | None,
    idempotency_key: Any,
    label: Any,
    actor: Any,
    priority: Any = 0,
    not_before: Any = None,
    limit_key: Any = None,
    config: JobsConfig,
    memo: BatchMemo | None = None,
) -> _Item:
    """Everything ``enqueue`` checks before it touches a store (see its raises);
    a pipeline's steps are prepared so too (nw/jobs/api/pipelines.py).
    ``memo``: a batch's kinds, each looked up once."""
    if not isinstance(kind, str) or not kind:
        raise UnknownKind(f"kind must be a non-empty string, got {kind!r}")
    known_kind = memo.kinds.get(kind) if memo is not None else None
    if known_kind is None:
        check_name(kind, "kind")
    label = check_label(label)
    who = check_actor(actor)
    if who is not None and memo is not None:
        who = memo.actors.setdefault(tuple(sorted(who.items())), who)
    priority = check_priority(priority)
    due = check_not_before(not_before)
    params = ids.check_json_params(costing.with_plan_dict(params))
    check_params(params)
    units = ids.check_units(params)
    if known_kind is None:
        known_kind = _kind_of(kind, dispatch)
        if memo is not None:
            memo.kinds[kind] = known_kind
    fn, spec = known_kind
    key = (
        limits.check_key(limit_key)
        if limit_key is not None
        else limits.key_for(spec.limit_key if spec else None, kind, params)
    )
    quote = quote_for(proj, kind, params, config)
    basis: str | None
    if idempotency_key is not None:
        basis = check_name(idempotency_key, "idempotency_key", MAX_KEY_CHARS)
    else:
        basis = quote.identity
    if not isinstance(basis, str) or not basis:
        raise InvalidValue("idempotency_key must be a non-empty string")
    job_id = ids.job_id_for(proj.project_id, kind, basis)
    return _Item(
        kind, params, units, fn, spec, quote, basis, job_id, label, who, priority, due, key
    )


def _kind_of(
    kind: str, dispatch: Mapping[str, Callable] | None
) -> tuple[Callable | None, kinds.KindSpec | None]:
    """(the kind's ``dispatch`` body, its registration); ``UnknownKind`` when
    it has neither."""
    fn = dispatch.get(kind) if dispatch else None
    spec = kinds.kind_spec(kind)
    if fn is None and spec is None:
        known = sorted(set(dispatch or ()) | set(kinds.registered_kinds()))
        raise UnknownKind(f"unknown kind {kind!r}; known kinds: {', '.join(known) or 'none'}")
    return fn, spec


def record_of(
    item: _Item,
    plan: eta.EtaPlan,
    samples: Mapping[str, list[float]],
    rt: Runtime | None,
    config: JobsConfig,
    memo: BatchMemo | None = None,
) -> dict[str, Any]:
    """The queued record of a prepared item (a pipeline's step too), with its
    ETA prediction. ``memo``: a batch's policies, predictions and trace, each worked out once
    (``samples`` are the batch's, read once before)."""
    fn = item.fn
    if memo is None:
        memo = BatchMemo(traced=tracing.carrier())  # the enqueue's span: each attempt's child
    # Retries are the worker tier's: a requeued job is claimed by a worker, and
    # an in-process body's callable lives only in the process that enqueued it.
    policy = memo.policies.get((item.kind, fn is None))
    if policy is None:
        policy = outcome.RetryPolicy.resolve(item.spec if fn is None else None, config)
        memo.policies[(item.kind, fn is None)] = policy
    prediction = memo.predictions.get(plan)
    if prediction is None:
        prediction = memo.predictions[plan] = eta.prediction_fields(plan, samples, config)
    record = new_record(
        job_id=item.job_id,
        kind=item.kind,
        label=item.label or _label(item.kind, item.params),
        idempotency_key=item.basis,
        params=item.params,
        now=config.clock(),
        plan=plan,
        prediction=prediction,
        estimated_usd=item.quote.estimated_usd,
        runner=RUNNER_INPROC if fn is not None else RUNNER_WORKER,
        max_attempts=policy.max_attempts,
        actor=item.actor,
        retryable=policy.retryable,
        runner_id=rt.runner_id if rt is not None and fn is not None else None,  # its owner
    )
    record.update(limit_key=item.limit_key, priority=item.priority, not_before=item.due)
    if memo.traced is not None:
        record["trace"] = memo.traced  # one object for the batch: never changed after
    return record


@tracing.traced("nw.jobs.enqueue")
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
    after: list[str] | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Job:
    """Enqueue a render as a background job; returns at once with the job.

    ``after``: job ids this job waits on (nw/jobs/api/pipelines.py): it starts
    once they have all succeeded (a body declaring ``inputs`` gets their
    results by job id), and is cancelled when one fails or is cancelled.

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
    if backend is not None:
        raise NotImplementedError("a custom backend is not supported; use JobsConfig")
    proj = as_project(project)
    item = prepare_item(
        proj,
        kind,
        params,
        dispatch=dispatch,
        idempotency_key=idempotency_key,
        label=label,
        actor=actor,
        priority=priority,
        not_before=not_before,
        limit_key=limit_key,
        config=config,
    )
    if after is not None:  # waits on other jobs: written with its links
        from nw.jobs.api.enqueue_after import check_after, enqueue_after

        launch = None
        if item.fn is not None:  # the hook and the fal key are read on the caller's thread
            capture = capture_context() if capture_context is not None else None
            launch = launching.body_launch(
                proj, item.fn, on_event=on_event, secrets=secrets, capture=capture
            )
        return enqueue_after(
            proj, item, check_after(after), launch=launch, approved=approved, config=config
        )
    fn, quote, job_id, who = item.fn, item.quote, item.job_id, item.actor
    # Refused before any store is created or opened for writing; checked again
    # inside the create transaction (``admit``), where concurrent enqueues serialise.
    now = config.clock()
    existing = shared_store(proj, config, create=False)
    quote.gate(existing, approved=approved, config=config, job_id=job_id)
    quote.gate_actor(existing, who, approved=approved, config=config, job_id=job_id, now=now)
    rt = writer(proj, config) if fn is not None else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    plan = eta.eta_plan(item.params, item.units, config)
    samples = store.samples(eta.sample_keys(plan), window=config.sample_window_k)
    record = record_of(item, plan, samples, rt, config)
    admit: Callable[[], None] | None = None
    if config.budget_usd is not None or (config.actor_budget_usd is not None and who):

        def admit() -> None:
            quote.gate(store, approved=approved, config=config, job_id=job_id)
            quote.gate_actor(store, who, approved=approved, config=config, job_id=job_id, now=now)

    # the stored spend policy, in the same admit (every door: nw/jobs/api/budgets.py)
    admit = budgets.admit_one(
        admit, store, quote, who, item.kind, approved=approved, config=config, now=now
    )
    # Called before anything is written: a hook that fails leaves no job behind.
    capture = capture_context() if (capture_context is not None and fn is not None) else None
    launch = (
        launching.body_launch(proj, fn, on_event=on_event, secrets=secrets, capture=capture)
        if fn is not None
        else None
    )
    row, created = store.create(record, claimable=fn is None, admit=admit)
    if not created and launching.dead_duplicate(store, row, rt, config):
        row, created = store.create(record, claimable=fn is None, admit=admit)
    if created and rt is not None:
        assert launch is not None  # a runtime is taken only for a body
        rt.take(row, launch)
    worker = None if created else worker_seen(store, row)
    return to_job(row, config.clock(), config, worker)


_ITEM_FIELDS = (
    "kind",
    "params",
    "idempotency_key",
    "label",
    "actor",
    "priority",
    "not_before",
    "limit_key",
)


def _item_fields(item: Any) -> dict[str, Any]:
    """An ``enqueue_many`` item as ``enqueue``'s arguments."""
    if isinstance(item, Mapping):
        unknown = sorted(set(map(str, item)) - set(_ITEM_FIELDS))
        if unknown:
            raise InvalidType(
                f"unknown field(s) {', '.join(map(repr, unknown))}; an item has "
                f"{', '.join(_ITEM_FIELDS)}"
            )
        if "kind" not in item:
            raise UnknownKind("an item needs a 'kind'")
        fields = {name: item.get(name) for name in _ITEM_FIELDS}
        fields["params"] = {} if fields["params"] is None else fields["params"]
        fields["priority"] = 0 if fields["priority"] is None else fields["priority"]
        return fields
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return {
            "kind": item[0],
            "params": item[1],
            "idempotency_key": None,
            "label": None,
            "actor": None,
        }
    raise InvalidType(
        f"an item is a (kind, params) pair or a mapping with 'kind' and 'params',"
        f" not {type(item).__name__}"
    )


@tracing.traced("nw.jobs.enqueue_many")
def enqueue_many(
    project: ProjectLike,
    items: Iterable[tuple[str, Mapping[str, Any]] | Mapping[str, Any]],
    *,
    dispatch: Mapping[str, Callable] | None = None,
    secrets: Mapping[str, str] | None = None,
    approved: bool = False,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[Job]:
    """Enqueue a batch: one store transaction and one worker wake-up for all.

    Each item is a ``(kind, params)`` pair or a mapping with ``kind``,
    ``params`` and optionally ``idempotency_key``, ``label``, ``actor``,
    ``priority``, ``not_before`` and ``limit_key``, and means exactly what
    ``enqueue`` with those arguments means: one job per distinct job id (an
    item whose job is live, in the store or earlier in this batch, gets that
    job back), a kind's ``limit_key``, today's quote, the ETA prediction, a
    ``dispatch`` body run here or a registered kind left for workers. The
    result lists one ``Job`` per item, in order.

    All or nothing: an item that ``enqueue`` would refuse refuses the whole
    batch before anything is written, with the error ``enqueue`` raises
    (same type) prefixed ``item N:`` (N its index in ``items``, from 0). The
    budgets (``config.budget_usd``, and ``config.actor_budget_usd`` per actor)
    are checked over the batch: it is admitted only if every new job in it
    fits, as if enqueued one after another.
    """
    proj = as_project(project)
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise InvalidType(f"items must be an iterable of items, not {type(items).__name__}")
    prepared: list[_Item] = []
    memo = BatchMemo(traced=tracing.carrier())  # the batch's span: each attempt's is its child
    for n, raw in enumerate(items):
        try:
            fields = _item_fields(raw)
            item = prepare_item(proj, **fields, dispatch=dispatch, config=config, memo=memo)
            prepared.append(item)
        except Exception as exc:
            raise named(exc, f"item {n}") from None
    first: dict[str, int] = {}  # job id -> its first item; later ones are duplicates
    for n, item in enumerate(prepared):
        first.setdefault(item.job_id, n)
    unique = sorted(first.values())
    now = config.clock()
    gated = config.budget_usd is not None or (
        config.actor_budget_usd is not None and any(prepared[n].actor for n in unique)
    )

    def gate(positions: list[int], store: JobStore | None) -> None:
        """The project's and the actors' budgets over these items (indexes in ``unique``)."""
        costing.gate_batch(
            [prepared[unique[k]].quote for k in positions],
            store,
            approved=approved,
            config=config,
            now=now,
            actors=[prepared[unique[k]].actor for k in positions],
            names=[f"item {unique[k]}" for k in positions],
        )

    if gated:  # before any store is created or opened for writing
        existing = shared_store(proj, config, create=False)
        # a resubmit of a live job is a dedup, not new spend
        gate(
            [
                k
                for k, n in enumerate(unique)
                if existing is None or not launching.is_live(existing.get(prepared[n].job_id))
            ],
            existing,
        )
    local = any(prepared[n].fn is not None for n in unique)
    rt = writer(proj, config) if local else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    plans = [eta.eta_plan(prepared[n].params, prepared[n].units, config) for n in unique]
    keys = list(dict.fromkeys(key for plan in plans for key in eta.sample_keys(plan)))
    samples = store.samples(keys, window=config.sample_window_k) if keys else {}
    records = [
        record_of(prepared[n], plan, samples, rt, config, memo)
        for n, plan in zip(unique, plans, strict=True)
    ]
    claimable = [prepared[n].fn is None for n in unique]
    admit: Callable[[list[int]], None] | None = None
    if gated:

        def admit(positions: list[int]) -> None:
            gate(positions, store)

    admit = budgets.admit_batch(  # the stored spend policy over the batch as a whole
        admit,
        store,
        [prepared[n].quote for n in unique],
        [budgets.who_of(prepared[n].actor, prepared[n].kind) for n in unique],
        [f"item {n}" for n in unique],
        approved=approved,
        config=config,
        now=now,
    )
    results = store.create_many(records, claimable=claimable, admit=admit)
    # A live duplicate whose worker died is closed now and created again, as
    # ``enqueue`` does (a second, small transaction: only those items).
    again = [
        k
        for k, (row, made) in enumerate(results)
        if not made and launching.dead_duplicate(store, row, rt, config)
    ]
    if again:
        # admit's positions are the batch's: map the redo's back to them
        readmit = None if admit is None else (lambda ps, f=admit: f([again[p] for p in ps]))
        redo = store.create_many(
            [records[k] for k in again], claimable=[claimable[k] for k in again], admit=readmit
        )
        for k, pair in zip(again, redo, strict=True):
            results[k] = pair
    if rt is not None:  # the bodies this process runs (each bound to the caller's fal key)
        held = [
            (row, launching.body_launch(proj, fn, secrets=secrets))
            for k, (row, made) in enumerate(results)
            if made and (fn := prepared[unique[k]].fn) is not None
        ]
        rt.take_all(held)
    now = config.clock()
    jobs = {unique[k]: to_job(row, now, config) for k, (row, _) in enumerate(results)}
    return [jobs[first[item.job_id]] for item in prepared]
