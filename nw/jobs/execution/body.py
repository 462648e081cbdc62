"""Running one attempt of one job's body, and writing how it ended.

The callable is ``fn(project, params, *, job_id, on_event, should_cancel,
secrets, resume)`` and receives only the keywords it declares. Every write it
causes (events, progress, the terminal status) carries the attempt it was
given, so a stale attempt cannot overwrite a newer one (see stores/base.py).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from au import ComputationResult, ComputationStatus

from nw.canonical import jsonable
from nw.jobs.api import tracing
from nw.jobs.core import eta, events, outcome
from nw.jobs.core.errors import JobCancelled, JobRefused, error_kind_of
from nw.jobs.core.eta import observed_fraction
from nw.jobs.core.ids import check_json_params
from nw.jobs.core.model import ERROR_KIND_CRASHED, JobsConfig
from nw.jobs.core.parked import Submitted
from nw.jobs.core.records import JobRow
from nw.jobs.execution import hooks, park
from nw.jobs.execution.pool import Answer
from nw.jobs.stores.roles import WorkerStore

log = logging.getLogger("nw.jobs")

OPTIONAL_KWARGS = ("job_id", "on_event", "should_cancel", "secrets", "resume", "webhook_url")
_CANCEL_POLL_S = 0.25
REPREDICT_AFTER_S = 1.0
"""A job that waited in the queue at least this long is predicted again at its start."""


def accepted_kwargs(fn: Callable, offered: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``offered`` keywords that ``fn`` declares (all, for **kwargs)."""
    accepts = _declared(fn)
    if accepts is None:
        return dict(offered)
    return {k: v for k, v in offered.items() if k in accepts}


@functools.lru_cache(maxsize=1024)
def _declared(fn: Callable) -> frozenset[str] | None:
    """The keyword names ``fn`` declares; None when it takes ``**kwargs``.
    Cached: inspecting a signature per job cost more than a no-op body."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)


def _wants_webhook(fn: Callable) -> bool:
    """The body declares ``webhook_url`` (by name: ``**kwargs`` is not asked for one)."""
    accepts = _declared(fn)
    return accepts is not None and "webhook_url" in accepts


def _wants_inputs(fn: Callable) -> bool:
    declared = _declared(fn)
    return declared is None or "inputs" in declared


def upstream_inputs(store: WorkerStore, rec: Mapping[str, Any]) -> dict[str, Any]:
    """A pipeline step's ``inputs``: the results of the jobs it came after, by
    step name (by job id for ``enqueue(after=...)``); None for an upstream that
    did not succeed (``allow_failure``) or is gone."""
    ups = [
        up
        for up in rec.get("after") or ()
        if isinstance(up, Mapping) and isinstance(up.get("job_id"), str)
    ]
    rows = store.get_many([up["job_id"] for up in ups])  # one query for a fan-in
    out: dict[str, Any] = {}
    for up in ups:
        row = rows.get(up["job_id"])
        ok = row is not None and row.status.value == "succeeded"
        out[str(up.get("step") or up["job_id"])] = row.result if ok and row is not None else None
    return out


def redact(text: str, secrets: Mapping[str, str] | None) -> str:
    for value in (secrets or {}).values():
        if isinstance(value, str) and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def redact_value(value: Any, secrets: Mapping[str, str] | None) -> Any:
    """``redact`` applied to every string inside a JSON-like value, mapping
    keys included, at any depth: the one rule for what a body reports (its
    events, its errors and its result) before it is stored."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {
            (redact(k, secrets) if isinstance(k, str) else k): redact_value(v, secrets)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_value(v, secrets) for v in value]
    return value


@dataclass
class Launch:
    """What the process that holds a job's callable keeps in memory for it."""

    fn: Callable
    project: Any
    on_event: Callable[[Any], None] | None = None
    capture: AbstractContextManager[Any] | None = None
    secrets: Mapping[str, str] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event | None = None
    """Set when the process is shutting down: the body is asked to stop at its
    next boundary and the job goes back to the queue for another worker."""
    timeout_s: float | None = None
    cancel_on_timeout: bool = False
    overdue: bool = False
    decided: outcome.Outcome | None = None
    """How the attempt's end was decided (set when it is written)."""
    handed_over: bool = False
    """The attempt's outcome is on its way to the store (its answer may still
    be pending): a stopping worker leaves such a job to it. A flag, not the
    write's future: that future's callbacks hold this launch (a cycle per job
    for the garbage collector to walk)."""
    parked: bool = False
    """The body returned ``Submitted``: its job waits on the provider, not here."""
    on_park: Callable[[], None] | None = None
    """Called once the body parked its job (``Submitted``): the process's
    poller starts if it has not (the in-process runtime's)."""
    setup: Callable[[Launch], None] | None = None
    """Called on the body's thread before the attempt, to fill in what may
    take time to get (a worker's secrets from its provider) off the thread
    that claimed the job. If it raises, the body does not run and the attempt
    ends with that error (as the body's own would end it)."""


class CancelProbe:
    """``should_cancel()``: the local flag, else the store, read at most every 0.25 s."""

    def __init__(
        self,
        store: WorkerStore,
        job_id: str,
        flag: threading.Event,
        stopping: threading.Event | None,
    ):
        self._store, self._job_id, self._flag, self._stopping = store, job_id, flag, stopping
        self._checked = 0.0

    def __call__(self) -> bool:
        if self._flag.is_set() or (self._stopping is not None and self._stopping.is_set()):
            return True
        now = time.monotonic()
        if now - self._checked >= _CANCEL_POLL_S:
            self._checked = now
            row = self._store.get(self._job_id)
            if row is None or row.record.get("cancel_requested"):
                self._flag.set()
        return self._flag.is_set()


class EventSink:
    """Stamps, mirrors and forwards a body's events (fenced by its attempt)."""

    def __init__(
        self,
        store: WorkerStore,
        row: JobRow,
        forward: Callable[[Any], None] | None,
        clock: Callable[[], float],
        secrets: Mapping[str, str] | None = None,
    ):
        self._store, self._forward, self._clock = store, forward, clock
        self._secrets = secrets
        self._record = dict(row.record)
        self._job_id = row.record["job_id"]
        self._attempt = row.record["attempt"]
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._points: list[tuple[float, float | None]] = []

    def __call__(self, event: Any) -> None:
        if isinstance(event, Mapping):
            event = dict(event)
            event.setdefault("job_id", self._job_id)
            event.setdefault("run_id", self._record.get("run_id"))
            event.setdefault("event_id", f"{self._record.get('run_id')}:{next(self._seq)}")
            with self._lock:
                patch = events.event_patch(self._record, event)
                moved = any(
                    name in patch and patch[name] != self._record.get(name)
                    for name in ("fraction", "stage_index", "stage_count")
                )
                if moved:  # the ETA reads progress as (time it was reported) / fraction
                    patch["progress_at"] = self._clock()
                self._record.update(patch)
                if moved:
                    self._points.append((patch["progress_at"], observed_fraction(self._record)))
            if patch:  # what reaches the store never carries a secret
                stored = redact_value(jsonable(patch), self._secrets)
                self._store.patch(self._job_id, stored, attempt=self._attempt)
            beat = events.progress_beat(event, self._clock())
            if beat is not None:
                beat = redact_value(beat, self._secrets)
                self._store.append_progress(self._job_id, beat, attempt=self._attempt)
        if self._forward is not None:
            try:
                self._forward(event)
            except Exception:
                log.exception("on_event sink failed for job %s", self._job_id)

    @property
    def record(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._record)

    def progress_points(self, started: Any, finished: float) -> list[list[float]]:
        """``[time share, fraction]`` of each progress report, for the ETA learner."""
        if not self._points or not isinstance(started, (int, float)) or finished <= started:
            return []  # no progress reported (most jobs): no lock to take
        with self._lock:
            points = list(self._points)
        span = finished - started
        return [[(t - started) / span, f] for t, f in points if f is not None and t >= started]


class Keep(Protocol):
    """Where an outcome whose write failed goes to be written again (``journal.Finishing.keep``)."""

    def __call__(
        self,
        job_id: str,
        attempt: int | None,
        decided: outcome.Outcome,
        result: Any,
        error: BaseException,
        done: Callable[[bool], None] | None = None,
    ) -> None: ...


def run_attempt(
    store: WorkerStore,
    row: JobRow,
    launch: Launch,
    config: JobsConfig,
    *,
    hand_over: bool = False,
    keep: Keep | None = None,
) -> ComputationResult:
    """Run the body once and write its terminal state; returns what au middleware sees.
    ``hand_over``: return once the outcome is handed to the store, not written;
    the result's ``metadata["written"]`` is the future of the store's answer.
    ``keep``: where an outcome goes whose write failed (it is written again
    until the store takes it; ``metadata["written"]`` is then settled when it
    is); without it, that failure is raised here, or logged once handed over."""
    error: BaseException | None = None
    try:
        if launch.setup is not None:
            launch.setup(launch)
    except BaseException as exc:  # nor may its setup: the body does not run, the attempt ends
        error = exc
    set_up = error is None
    row = _fresh_attempt(store, _repredict(store, row, config))
    rec = row.record
    job_id, attempt = rec["job_id"], rec["attempt"]
    # a span of its own (the `otel` extra): the child of the enqueue's, in any process
    with tracing.attempt_span(rec) as traced:
        sink = EventSink(store, row, launch.on_event, config.clock, launch.secrets)
        offered = {
            "job_id": job_id,
            "on_event": sink,
            "should_cancel": CancelProbe(store, job_id, launch.cancel, launch.stopping),
            "secrets": dict(launch.secrets or {}),
            "resume": rec.get("resume"),
        }
        hooked = _wants_webhook(launch.fn)
        if hooked:  # signed for this job and attempt, valid before the body submits
            offered["webhook_url"] = hooks.url_for(launch.project, job_id, attempt)
        kwargs = accepted_kwargs(launch.fn, offered)
        value: Any = None
        try:
            if rec.get("after") and _wants_inputs(launch.fn):
                kwargs["inputs"] = upstream_inputs(store, rec)
            if error is None:
                with launch.capture if launch.capture is not None else nullcontext():
                    value = launch.fn(launch.project, dict(rec.get("params") or {}), **kwargs)
                if isinstance(value, Submitted):  # the provider has it: the slot goes
                    webhook = hooked and offered.get("webhook_url") is not None
                    parked = park.park_attempt(
                        store, sink.record, value, webhook=webhook, config=config
                    )
                    launch.parked = True
                    if launch.on_park is not None:
                        launch.on_park()
                    return parked
                if value is not None:  # a result never stores a secret
                    check_json_params({"result": value})
                    value = redact_value(value, launch.secrets)
        except BaseException as exc:  # a body must never leave its job RUNNING
            error = exc
        record = sink.record
        now = config.clock()
        meta = {
            "eta_candidates": record.get("eta_candidates"),
            "output_kind": record.get("output_kind"),
            "units": record.get("units"),
            "cached": bool(record.get("cached")),
            "progress": sink.progress_points(rec.get("started_at"), now),
        }
        ending = _ending(error, value, record, launch, now)
        decided = outcome.decide(
            ending,
            record,
            outcome.RetryPolicy.of(rec, config),
            now=now,
            cancel_requested=_cancel_requested(store, job_id, launch, returned=error is None),
        )
        decided = tracing.attempt_ended(traced, record, ending.fields, decided)
    if error is not None and ending.error_kind == ERROR_KIND_CRASHED:
        if isinstance(error, Exception):
            extra = "" if decided.note == ending.message else f" ({decided.note})"
            log.error("job %s crashed: %s%s", job_id, ending.message, extra)
        elif set_up:
            log.warning("job %s body raised %s", job_id, type(error).__name__)
        else:
            log.warning("job %s: its setup raised %s; the body did not run", job_id, ending.message)
    launch.handed_over = True
    written = outcome.write_soon(store, job_id, attempt, decided, value)
    stored = value if decided.au_status is ComputationStatus.COMPLETED else None
    if not hand_over and (keep is None or written.exception() is None):
        # the in-process thread waits for its commit; a store error is raised here
        if not written.result():
            _refused(job_id, attempt)
        else:
            launch.decided = decided
    else:  # the slot waits on the answer (a kept outcome's included), not this thread
        answered = Answer()

        def settle(ok: bool | None) -> None:
            if ok:
                launch.decided = decided
            elif ok is False:
                _refused(job_id, attempt)
            answered.set_result(None)  # what waits on the answer runs after this

        def on_written(w: Future) -> None:
            error = w.exception()
            if error is not None and keep is not None:
                try:  # held, beating, and written again until the store takes it
                    keep(job_id, attempt, decided, stored, error, done=settle)
                    return
                except Exception:
                    log.exception("job %s: its outcome could not be kept", job_id)
            try:
                _written(w, launch, decided, job_id, attempt)
            finally:
                answered.set_result(None)

        written.add_done_callback(on_written)
        meta["written"] = answered
    if decided.au_status is ComputationStatus.COMPLETED and error is None:
        meta["cached"] = meta["cached"] or bool(ending.fields.get("cached"))
        return ComputationResult(value, ComputationStatus.COMPLETED, metadata=meta)
    if decided.requeued and ending.how is outcome.Ended.STOPPED:
        return ComputationResult(None, ComputationStatus.CANCELLED, metadata=meta)
    message = decided.error or ending.message or "stopped"
    return ComputationResult(
        None, ComputationStatus.FAILED, error=RuntimeError(message), metadata=meta
    )


def _ending(
    error: BaseException | None,
    value: Any,
    record: dict[str, Any],
    launch: Launch,
    now: float,
) -> outcome.Ending:
    """What the body did, as the outcome policy reads it."""
    if error is None:
        fields = events.result_patch(record, value)
        return outcome.Ending(outcome.Ended.RETURNED, now, fields=fields)
    kind = error_kind_of(error)
    fields = {}
    if isinstance(error, JobRefused):
        fields["error_detail"] = redact_value(jsonable({"d": error.detail})["d"], launch.secrets)
    stopping = launch.stopping is not None and launch.stopping.is_set()
    how = outcome.Ended.STOPPED if stopping else outcome.Ended.RAISED
    message = redact(_describe(error), launch.secrets)
    return outcome.Ending(how, now, error_kind=kind, message=message, fields=fields)


_PER_ATTEMPT = ("error", "error_kind", "error_detail", *events.PROGRESS_FIELDS)


def _fresh_attempt(store: WorkerStore, row: JobRow) -> JobRow:
    """A retried (or resumed after a stop) attempt starts clean: no error while
    running, progress from zero. A first attempt has nothing to clear."""
    rec = row.record
    stale = {name: None for name in _PER_ATTEMPT if rec.get(name) is not None}
    if not stale:
        return row
    store.patch(rec["job_id"], stale, attempt=rec["attempt"])
    return JobRow({**rec, **stale}, row.au_status, row.result, row.error)


def _repredict(store: WorkerStore, row: JobRow, config: JobsConfig) -> JobRow:
    """Predict again at the running transition: samples learned while the job
    waited in the queue (a drift, a warmed key) count for its ETA."""
    rec = row.record
    plan = eta.plan_of_record(rec)
    if not plan.candidates or plan.expected_cache_hit:
        return row
    waited = (rec.get("started_at") or 0.0) - (rec.get("created_at") or 0.0)
    if waited < REPREDICT_AFTER_S:  # nothing can have been learned meanwhile worth a write
        return row
    samples = store.samples(eta.sample_keys(plan), window=config.sample_window_k)
    fields = eta.prediction_fields(plan, samples, config)
    if all(rec.get(k) == v for k, v in fields.items()):
        return row
    store.patch(rec["job_id"], fields, attempt=rec["attempt"])
    return JobRow({**rec, **fields}, row.au_status, row.result, row.error)


def _written(
    written: Future, launch: Launch, decided: outcome.Outcome, job_id: str, attempt: int
) -> None:
    """A handed-over outcome, once the store answered (before its slot is let
    go: the runtime's callback comes after this one)."""
    error = written.exception()
    if error is not None:  # the store failed under the body: say so, loudly
        log.error("job %s: could not record its outcome", job_id, exc_info=error)
        return
    if not written.result():
        _refused(job_id, attempt)
        return
    launch.decided = decided


def _refused(job_id: str, attempt: int) -> None:
    log.warning(
        "job %s: attempt %s is no longer current (or the job was finished meanwhile);"
        " its outcome was refused",
        job_id,
        attempt,
    )


def _cancel_requested(store: WorkerStore, job_id: str, launch: Launch, returned: bool) -> bool:
    """A success is written on what the attempt knows (its flag, set by the cancel
    probe and the heartbeat): one more read per job cost the PostgreSQL drain a
    third of its rate, and the read side reads a later request from the same
    flag (``status.cancelled_error``). A failure asks the store: it decides
    between a retry and the end."""
    if launch.cancel.is_set():
        return True
    if returned:
        return False
    try:
        row = store.get(job_id)
    except Exception:  # the store is away: decide on what the attempt knows, and keep it
        log.warning("job %s: could not read whether a cancel was asked", job_id, exc_info=True)
        return False
    return row is None or bool(row.record.get("cancel_requested"))


def _describe(error: BaseException) -> str:
    if isinstance(error, (JobRefused, JobCancelled)):
        return str(error) or ("cancelled" if isinstance(error, JobCancelled) else "refused")
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
