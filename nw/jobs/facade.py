"""The public facade: validate, ask the pure core, read or write the store, project.

Write paths (``enqueue``, ``cancel_job``) open the project's store and, for
in-process bodies, its runtime. Read paths open the store only if it exists
and never start a runtime; ``summarize`` and ``snapshot`` open it read-only
and write nothing at all (no reap, no progress floor).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from au import ComputationStatus
from au.base import ComputationBackend

from nw.errors import InvalidType, InvalidValue, UnknownKind
from nw.jobs import (
    costing,
    credentials,
    eta,
    ids,
    kinds,
    limits,
    liveness,
    queue_view,
    recovery,
    waits,
)
from nw.jobs.body import Launch
from nw.jobs.costing import quote_for
from nw.jobs.model import (
    ACTIVE_STATUSES,
    DEFAULT_CONFIG,
    RUNNER_INPROC,
    RUNNER_WORKER,
    Job,
    JobsConfig,
    Status,
)
from nw.jobs.records import JobRow, new_record, to_job
from nw.jobs.runtime import LocalRuntimes, Runtime, existing_runtime, runtime_for
from nw.jobs.stores import open_store, shared_store, store_location
from nw.jobs.stores.base import JobStore
from nw.project import Project, as_project

log = logging.getLogger("nw.jobs")
ProjectLike = Project | str | os.PathLike[str]


def _runtime(project: Project, config: JobsConfig) -> Runtime:
    key = store_location(project, config)
    return runtime_for(key, lambda: shared_store(project, config, create=True), config)


def _reader(project: Project, config: JobsConfig) -> tuple[JobStore | None, LocalRuntimes | None]:
    """This process's handle on the project's store (None if it has none) and
    the runtime when this process runs bodies for it."""
    store = shared_store(project, config, create=False)
    if store is None:
        return None, None
    return store, existing_runtime(store_location(project, config))


def _label(kind: str, params: Mapping[str, Any]) -> str:
    title = params.get("title") or params.get("label")
    return str(title) if title else kind


def _actor(actor: Any) -> dict[str, str] | None:
    if actor is None:
        return None
    if isinstance(actor, str):
        return {"id": actor}
    if isinstance(actor, Mapping) and actor.get("id"):
        out = {"id": str(actor["id"])}
        if actor.get("handle"):
            out["handle"] = str(actor["handle"])
        return out
    raise InvalidType("actor must be an id string or a mapping with 'id' (and 'handle')")


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


def _prepare(
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
) -> _Item:
    """Everything ``enqueue`` checks before it touches a store (see its raises)."""
    if not isinstance(kind, str) or not kind:
        raise UnknownKind(f"kind must be a non-empty string, got {kind!r}")
    who = _actor(actor)
    priority = _check_priority(priority)
    due = _check_not_before(not_before)
    params = ids.check_json_params(costing.with_plan_dict(params))
    units = ids.check_units(params)
    fn = dispatch.get(kind) if dispatch else None
    spec = kinds.kind_spec(kind)
    if fn is None and spec is None:
        known = sorted(set(dispatch or ()) | set(kinds.registered_kinds()))
        raise UnknownKind(f"unknown kind {kind!r}; known kinds: {', '.join(known) or 'none'}")
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
    return _Item(
        kind, params, units, fn, spec, quote, basis, job_id, label, who, priority, due, key
    )


def _new_record(
    item: _Item,
    plan: eta.EtaPlan,
    samples: Mapping[str, list[float]],
    rt: Runtime | None,
    config: JobsConfig,
) -> dict[str, Any]:
    """The queued record of a prepared item, with its ETA prediction."""
    fn, spec = item.fn, item.spec
    # Retries are the worker tier's: a requeued job is claimed by a worker, and
    # an in-process body's callable lives only in the process that enqueued it.
    retryable = bool(fn is None and spec and spec.retryable)
    max_attempts = spec.max_attempts if spec and spec.max_attempts else config.max_attempts
    record = new_record(
        job_id=item.job_id,
        kind=item.kind,
        label=item.label or _label(item.kind, item.params),
        idempotency_key=item.basis,
        params=item.params,
        now=config.clock(),
        plan=plan,
        prediction=eta.prediction_fields(plan, samples, config),
        estimated_usd=item.quote.estimated_usd,
        runner=RUNNER_INPROC if fn is not None else RUNNER_WORKER,
        max_attempts=max_attempts if retryable else 1,
        actor=item.actor,
        retryable=retryable,
        runner_id=rt.runner_id if rt is not None and fn is not None else None,  # its owner
    )
    record.update(limit_key=item.limit_key, priority=item.priority, not_before=item.due)
    return record


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
    if backend is not None:
        raise NotImplementedError("a custom backend is not supported; use JobsConfig")
    proj = as_project(project)
    item = _prepare(
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
    fn, quote, job_id, who = item.fn, item.quote, item.job_id, item.actor
    # Refused before any store is created or opened for writing; checked again
    # inside the create transaction (``admit``), where concurrent enqueues serialise.
    now = config.clock()
    existing = shared_store(proj, config, create=False)
    quote.gate(existing, approved=approved, config=config, job_id=job_id)
    quote.gate_actor(existing, who, approved=approved, config=config, job_id=job_id, now=now)
    rt = _runtime(proj, config) if fn is not None else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    plan = eta.eta_plan(item.params, item.units, config)
    samples = store.samples(eta.sample_keys(plan), window=config.sample_window_k)
    record = _new_record(item, plan, samples, rt, config)
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
            rt.submit(job_id, launch, priority=item.priority, not_before=item.due)
        except BaseException as exc:  # e.g. the runtime is shutting down
            _fail_unlaunched(store, row, exc, config)
            raise
    worker = None if created else _worker(store, row)
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


def _about(exc: BaseException, name: str) -> BaseException:
    """``exc`` (same type, same attributes) with its message naming the item."""
    first = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    exc.args = (f"{name}: {first}", *exc.args[1:])
    return exc


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
    for n, raw in enumerate(items):
        try:
            prepared.append(_prepare(proj, **_item_fields(raw), dispatch=dispatch, config=config))
        except Exception as exc:
            raise _about(exc, f"item {n}") from None
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
                if existing is None or not _is_live(existing.get(prepared[n].job_id))
            ],
            existing,
        )
    local = any(prepared[n].fn is not None for n in unique)
    rt = _runtime(proj, config) if local else None
    store = rt.store if rt is not None else shared_store(proj, config, create=True)
    plans = [eta.eta_plan(prepared[n].params, prepared[n].units, config) for n in unique]
    keys = list(dict.fromkeys(key for plan in plans for key in eta.sample_keys(plan)))
    samples = store.samples(keys, window=config.sample_window_k) if keys else {}
    records = [
        _new_record(prepared[n], plan, samples, rt, config)
        for n, plan in zip(unique, plans, strict=True)
    ]
    claimable = [prepared[n].fn is None for n in unique]
    admit = None
    if gated:

        def admit(positions: list[int]) -> None:
            gate(positions, store)

    results = store.create_many(records, claimable=claimable, admit=admit)
    # A live duplicate whose worker died is closed now and created again, as
    # ``enqueue`` does (a second, small transaction: only those items).
    again = [
        k
        for k, (row, made) in enumerate(results)
        if not made and _dead_duplicate(store, row, rt, config)
    ]
    if again:
        redo = store.create_many(
            [records[k] for k in again], claimable=[claimable[k] for k in again], admit=admit
        )
        for k, pair in zip(again, redo, strict=True):
            results[k] = pair
    for k, (row, made) in enumerate(results):
        item = prepared[unique[k]]
        if made and rt is not None and item.fn is not None:
            launch = Launch(fn=item.fn, project=proj, secrets=dict(secrets or {}))
            try:
                rt.submit(item.job_id, launch, priority=item.priority, not_before=item.due)
            except BaseException as exc:  # e.g. the runtime is shutting down
                _fail_unlaunched(store, row, exc, config)
                raise
    now = config.clock()
    jobs = {unique[k]: to_job(row, now, config) for k, (row, _) in enumerate(results)}
    return [jobs[first[item.job_id]] for item in prepared]


def _is_live(row: JobRow | None) -> bool:
    return row is not None and row.status in ACTIVE_STATUSES


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


def _waits(store: JobStore, rows: list[JobRow], config: JobsConfig) -> dict[str, waits.Wait]:
    """The predicted start and what holds each queued job of ``rows`` (see
    ``nw.jobs.waits``): one replay of the queue for the whole page, only when a
    job is queued, and shared by the reads of the next second (``queue_view``)."""
    queued = [r for r in rows if r.status.value == "queued"]
    if not queued:
        return {}
    now = config.clock()
    kept = queue_view.replay(
        store, now, (r.record["job_id"] for r in queued), lambda: _replay(store, now, config)
    )
    lims, planned = kept.limits, kept.planned
    out = {}
    for row in queued:
        job_id, rec = row.record["job_id"], row.record
        if job_id in planned:
            out[job_id] = planned[job_id]
            continue
        # in-process (its owner starts it), or beyond the replayed horizon
        due = rec.get("not_before")
        delayed = isinstance(due, (int, float)) and due > now + 0.5
        lim = lims.get(rec.get("limit_key"))
        if delayed:
            out[job_id] = waits.Wait(None, limits.delay_text(due - now))
        elif lim is not None and limits.is_full(lim):
            out[job_id] = waits.Wait(None, limits.waiting_text(lim))
        elif not liveness.runs_inproc(rec):
            out[job_id] = waits.Wait(None, None)
    return out


def _replay(store: JobStore, now: float, config: JobsConfig) -> queue_view.Replay:
    """Read the queue ahead, the running jobs, the workers and the limits, and
    replay them (``waits.plan_starts``)."""
    lims = {lim.key: lim for lim in store.limits(now=now)}
    running = [
        waits.Running(r.record.get("limit_key"), _remaining(r, now, config))
        for r in store.page(status="running", limit=waits.QUEUE_HORIZON)
    ]
    slots = waits.worker_slots(store.runners(), now=now, stale_s=config.heartbeat_stale_s)
    ahead = store.queue_ahead(limit=waits.QUEUE_HORIZON)
    planned = waits.plan_starts(ahead, running, slots=slots, limits=lims, now=now)
    return queue_view.Replay(now, lims, planned, truncated=len(ahead) >= waits.QUEUE_HORIZON)


def _remaining(row: JobRow, now: float, config: JobsConfig) -> float | None:
    """A running job's expected remaining seconds (None: only a prior says)."""
    started = row.record.get("started_at")
    elapsed = None if started is None else now - float(started)
    view = eta.project_eta(row.record, "running", elapsed_s=elapsed, config=config)
    return None if view.confidence == "prior" else view.remaining_s


def _read(
    store: JobStore,
    row: JobRow,
    rt: LocalRuntimes | None,
    config: JobsConfig,
    workers: recovery.Workers | None = None,
    wait: waits.Wait | None = None,
) -> Job:
    """Project one row for a per-project view: reap a dead worker's job, keep pct monotonic."""
    now = config.clock()
    holds = rt.holds if rt is not None else (lambda _id: False)
    if workers is None:  # a finished job has no worker to ask about: no read
        workers = recovery.workers_seen(store) if row.status in ACTIVE_STATUSES else {}
    if not store.read_only:
        row = recovery.maybe_reap(store, row, now, config, holds, workers)
    job = to_job(row, now, config, recovery.worker_of(row, workers), wait)
    floor = row.record.get("pct_floor")
    if (
        not store.read_only
        and job.pct is not None
        and job.status in (Status.RUNNING, Status.CANCELLING)
        and (floor is None or job.pct >= float(floor) + 1.0)
    ):
        store.patch(job.job_id, {"pct_floor": job.pct}, attempt=None)
    return job


def stores_to_reap(
    projects: Iterable[ProjectLike], config: JobsConfig
) -> list[tuple[JobStore, Callable[[str], bool]]]:
    """Each project's store that exists, with what this process holds of it
    (for a ``reaper.ReaperThread``: a server keeps its projects reaped)."""
    out = []
    for proj in projects:
        store, rt = _reader(as_project(proj), config)
        if store is not None:
            out.append((store, rt.holds if rt is not None else (lambda _id: False)))
    return out


def get_job(
    project: ProjectLike, job_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> Job | None:
    """One job, or None if unknown (any string that cannot name a job is
    unknown). Reaps a job whose worker is gone."""
    if not _could_name_a_job(job_id):
        return None
    store, rt = _reader(as_project(project), config)
    if store is None:
        return None
    row = store.get(job_id)
    if row is None:
        return None
    return _read(store, row, rt, config, wait=_waits(store, [row], config).get(job_id))


def list_jobs(
    project: ProjectLike,
    *,
    status: str | Status | None = None,
    limit: int = 50,
    actor: str | None = None,
    kind: str | None = None,
    grade: str | None = None,
    q: str | None = None,
    before: str | tuple[float, str] | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[Job]:
    """This project's jobs, newest first (ties by id), optionally by status,
    kind, actor and grade, and by ``q``, a case-insensitive substring of the
    label. ``before`` is a job id (a cursor): only jobs older than it follow,
    so passing the last id of a page walks the whole history, ``limit`` at a
    time. Raises ``InvalidValue`` for a bad filter, or a ``before`` that names
    no job of the project."""
    status = _check_status(status)
    limit = _check_limit(limit)
    grade = _check_grade(grade)
    kind, actor, q = (
        _check_text(v, name) for v, name in ((kind, "kind"), (actor, "actor"), (q, "q"))
    )
    store, rt = _reader(as_project(project), config)
    if store is None:
        return []
    cursor = _cursor(store, before)
    # A read that reaps moves jobs out of the status asked for (running -> queued
    # or failed): read the page again until it holds only that status, so a page
    # neither lies nor comes back short. Each round reaps what it found, so the
    # rounds are few; the bound only guards against a store that keeps changing.
    for _ in range(_REREADS):
        rows = store.page(
            status=status, actor_id=actor, kind=kind, grade=grade, q=q, before=cursor, limit=limit
        )
        workers = _workers_for(store, rows)
        held = _waits(store, rows, config)
        page = [
            _read(store, row, rt, config, workers, held.get(row.record["job_id"])) for row in rows
        ]
        if status is None or all(job.status == status for job in page):
            return page
    return [job for job in page if job.status == status]


_REREADS = 10


def _workers_for(store: JobStore, rows: list[JobRow]) -> recovery.Workers:
    """The announced workers, read once for a page (not at all for a finished one)."""
    live = any(row.status in ACTIVE_STATUSES for row in rows)
    return recovery.workers_seen(store) if live else {}


def _worker(store: JobStore, row: JobRow) -> Any:
    """The job's worker process as the store announces it (None for a finished job)."""
    if row.status not in ACTIVE_STATUSES:
        return None
    return recovery.worker_of(row, recovery.workers_seen(store))


def cancel_job(
    project: ProjectLike, job_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> Job | None:
    """Request cancellation; idempotent; None if unknown; a finished job is untouched."""
    if not _could_name_a_job(job_id):
        return None
    proj = as_project(project)
    store, rt = _reader(proj, config)
    if store is None:
        return None
    row = store.request_cancel(job_id, now=config.clock())
    if row is None:
        return None
    if rt is not None:
        rt.local_cancel(job_id)
    return to_job(row, config.clock(), config, _worker(store, row))


def summarize(
    project_root: ProjectLike,
    *,
    limit: int = 50,
    status: str | Status | None = None,
    actor: str | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[Job]:
    """This project's jobs without touching it: creates nothing, reaps nothing,
    caches nothing; [] for a project that never ran a job."""
    status, limit = _check_status(status), _check_limit(limit)
    store = open_store(as_project(project_root), config, create=False)
    if store is None:
        return []
    try:
        now, rows = config.clock(), store.page(status=status, actor_id=actor, limit=limit)
        workers = _workers_for(store, rows)
        return [to_job(r, now, config, recovery.worker_of(r, workers)) for r in rows]
    finally:
        store.close()


def snapshot(
    projects: Iterable[ProjectLike],
    *,
    actor: str | None = None,
    active_limit: int = 20,
    recent_limit: int = 12,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """What is running across projects plus the recently finished tail; read-only
    like ``summarize`` (per project: its unfinished jobs, and the newest of each
    terminal status)."""
    from nw.jobs.records import to_dict

    active, recent = [], []
    now = config.clock()
    for proj in projects:
        project = as_project(proj)
        store = open_store(project, config, create=False)
        if store is None:
            continue
        try:
            rows = [r for r in store.live() if _actor_matches(r, actor)]
            workers = _workers_for(store, rows)
            held = _waits(store, rows, config)
            for status in ("succeeded", "failed", "cancelled"):
                rows += store.page(status=status, actor_id=actor, limit=recent_limit)
        finally:
            store.close()
        latest = {row.record["job_id"]: row for row in rows}  # a job that finished between
        for row in latest.values():  # the two reads appears once, as finished
            worker = recovery.worker_of(row, workers)
            job = to_job(row, now, config, worker, held.get(row.record["job_id"]))
            (recent if job.is_terminal else active).append((str(project.root), job))
    active.sort(key=lambda pj: pj[1].created_at, reverse=True)
    recent.sort(key=lambda pj: pj[1].finished_at or pj[1].created_at, reverse=True)
    return {
        "active": [{**to_dict(j), "project": r} for r, j in active[:active_limit]],
        "recent": [{**to_dict(j), "project": r} for r, j in recent[:recent_limit]],
        "active_count": len(active),
        "now": now,
    }


def _actor_matches(row: JobRow, actor: str | None) -> bool:
    who = row.record.get("actor")
    return actor is None or (isinstance(who, Mapping) and who.get("id") == actor)


def get_job_progress(
    project: ProjectLike,
    job_id: str,
    *,
    limit: int = 200,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[dict[str, Any]]:
    """The job's progress trail (ts, pct, message, stage), oldest first; empty if unknown."""
    if not _could_name_a_job(job_id):
        return []
    store, _ = _reader(as_project(project), config)
    return [] if store is None else store.progress(job_id, limit=_check_limit(limit))


def estimate(
    project: ProjectLike,
    kind: str,
    params: Mapping[str, Any],
    *,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """Dry-run cost gate: ``{estimated_usd, has_unknown_costs, approval_threshold_usd,
    requires_approval, quote}``; writes nothing.

    With ``params["plan"]`` (a dict or a live ``falaw.Plan``) the plan is
    re-quoted at today's rates and ``quote`` is ``nw.pricing.PlanQuote`` as a
    dict plus ``caller_estimated_usd`` (what ``params["estimated_usd"]`` said,
    reported, never used). A plan that cannot be read gives
    ``estimated_usd: None`` and ``reason: UNREADABLE_PLAN_REASON`` (the error
    goes to the log). Without a plan the estimate is ``params["estimated_usd"]``
    and ``quote`` is None. Unknown cost always requires approval. Raises
    ``InvalidValue`` (a ``ValueError``) on malformed ``units``, like ``enqueue``.
    """
    if not isinstance(params, Mapping):
        raise InvalidType(f"params must be a dict, not {type(params).__name__}")
    ids.check_json_params({k: v for k, v in params.items() if k != "plan"})
    ids.check_units(params)
    quote = quote_for(as_project(project), kind, dict(params), config, for_estimate=True)
    return quote.as_estimate(config)


def spend(
    project: ProjectLike, *, actor: str | None = None, config: JobsConfig = DEFAULT_CONFIG
) -> dict[str, Any]:
    """The project's committed spend (or one actor's); writes nothing.

    With ``actor`` (an id): that actor's jobs created in the last
    ``config.actor_budget_window_s``, against ``config.actor_budget_usd``
    (``budget_usd`` and ``remaining_usd`` are the actor's; ``window_s`` says
    the window).

    ``{actual_usd, live_estimated_usd, total_usd, live_unknown_count,
    is_lower_bound, budget_usd, remaining_usd}``: the actual spend of finished
    jobs plus the estimates of live ones. ``is_lower_bound`` is True when a
    finished job's actual is a lower bound or was never reported, or a live
    job's estimate is unknown: the real total may be higher (and
    ``remaining_usd`` lower)."""
    store, _ = _reader(as_project(project), config)
    if actor is None:
        totals = store.spend() if store is not None else costing.NO_SPEND
        return costing.spend_view(totals, config)
    if not isinstance(actor, str) or not actor:
        raise InvalidType("actor must be a non-empty id string")
    since = config.clock() - config.actor_budget_window_s
    totals = store.spend(actor_id=actor, since=since) if store is not None else costing.NO_SPEND
    view = costing.spend_view(totals, config, cap=config.actor_budget_usd)
    return {**view, "actor": actor, "window_s": config.actor_budget_window_s}


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
    store, _ = _reader(as_project(project), config)
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


def _could_name_a_job(job_id: object) -> bool:
    """False for a string that cannot be one of our ids: the seed's reads answer
    "unknown" for it, and it never reaches a path, a store or SQL."""
    if not isinstance(job_id, str):
        raise InvalidType(f"job_id must be a string, not {type(job_id).__name__}")
    return ids.is_job_id(job_id)


def _check_status(status: str | Status | None) -> str | None:
    if status is None:
        return None
    try:
        return Status(status).value
    except ValueError:
        valid = ", ".join(s.value for s in Status)
        raise InvalidValue(f"unknown status {status!r}; one of: {valid}") from None


def _check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidType(f"priority must be an int, not {type(priority).__name__}")
    if not -1_000_000 <= priority <= 1_000_000:
        raise InvalidValue(f"priority must be from -1000000 to 1000000, got {priority}")
    return priority


def _check_not_before(when: Any) -> float | None:
    """Epoch seconds of a delay (an aware datetime or a number), or None."""
    if when is None:
        return None
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidValue("not_before must be an aware datetime (a naive one has no zone)")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        raise InvalidType(f"not_before must be epoch seconds or a datetime, not {when!r}")
    return float(when)


GRADES = ("ok", "notice", "warning", "error")


def _check_grade(grade: str | None) -> str | None:
    if grade is None or grade in GRADES:
        return grade
    raise InvalidValue(f"unknown grade {grade!r}; one of: {', '.join(GRADES)}")


def _check_text(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidType(f"{name} must be a string, not {type(value).__name__}")
    return value or None


def cursor_of(
    project: ProjectLike, job_id: str, *, config: JobsConfig = DEFAULT_CONFIG
) -> tuple[float, str] | None:
    """The ``(created_at, job_id)`` cursor of a job of ``project`` (None if it has
    no such job): what a page merged across projects continues after in each."""
    if not _could_name_a_job(job_id):
        return None
    store, _ = _reader(as_project(project), config)
    row = store.get(job_id) if store is not None else None
    return None if row is None else (float(row.record["created_at"]), job_id)


def _cursor(store: JobStore, before: str | tuple[float, str] | None) -> tuple[float, str] | None:
    """The ``(created_at, job_id)`` a page continues after: ``before`` is a job id
    of this project, or the cursor of one of another (see ``cursor_of``)."""
    if before is None:
        return None
    if isinstance(before, tuple):
        return float(before[0]), str(before[1])
    if not _could_name_a_job(before):
        raise InvalidValue(f"before must be a job id (64 hex characters), got {before!r}")
    row = store.get(before)
    if row is None:
        raise InvalidValue(f"before: no job {before} in this project (pruned, or never there)")
    return float(row.record["created_at"]), before


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidValue(f"limit must be an int from 1 to 10000, got {limit!r}")
    return limit
