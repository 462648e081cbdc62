"""Traces from a web request to the worker that ran its job (the ``otel`` extra).

``enqueue`` runs in a span (``nw.jobs.enqueue``, a child of whatever span is
current: the web request's) and stores that span's W3C ``traceparent`` with
the job (``record["trace"]``). Each attempt runs in a span of its own
(``nw.jobs.attempt``) whose parent is the stored one, in whichever process
runs it, so a trace follows a render across processes and hosts; a retried
attempt also links to the first attempt's span (``record["trace_attempt"]``,
written with the requeue). The spans carry the job id, kind, attempt,
outcome and cost.

Without ``opentelemetry-api`` nothing here does anything, and nothing is
stored; with the API but no SDK configured the tracer is OpenTelemetry's
no-op one, which injects nothing, so nothing is stored either.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

try:  # the `otel` extra
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised by the no-extra test in a subprocess
    propagate = trace = None  # type: ignore[assignment]

#: The instrumentation scope's name, as exporters show it.
SCOPE = "nw.jobs"

#: A ``TracerProvider`` to use instead of the global one (tests; an app that
#: keeps nw's spans apart). None: OpenTelemetry's global provider.
provider: Any = None


def flush(timeout_ms: int = 5000) -> bool:
    """Export the spans a provider still holds (an SDK's batch processor keeps
    some in memory until its exit handler runs). A worker that leaves by
    ``os._exit``, because a body outlived its grace period, runs no exit
    handlers: it calls this first. False when nothing could be flushed."""
    if trace is None:
        return False
    force_flush = getattr(provider or trace.get_tracer_provider(), "force_flush", None)
    if not callable(force_flush):  # the API's no-op provider
        return False
    try:
        return bool(force_flush(timeout_ms))
    except Exception:  # an exporter's failure must not keep a worker from leaving
        return False


def _tracer() -> Any:
    if trace is None:
        return None
    return (provider or trace.get_tracer_provider()).get_tracer(SCOPE)


@contextlib.contextmanager
def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    parent: Mapping[str, Any] | None = None,
    links: tuple[Mapping[str, Any] | None, ...] = (),
) -> Iterator[Any]:
    """A span named ``name``, current for the block (None without the extra).
    ``parent``: a stored carrier (``carrier()``) the span is the child of,
    instead of the current span; ``links``: carriers of spans it links to."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    context = propagate.extract(dict(parent)) if parent else None
    linked = [trace.Link(c) for c in (_span_context(x) for x in links) if c is not None]
    with tracer.start_as_current_span(
        name, context=context, links=linked, attributes=_clean(attributes or {})
    ) as current:
        yield current


def traced(name: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Run the decorated call in a span ``name``, annotated with the job (or
    jobs) it returns. The call keeps its signature (a type checker still
    reads ``enqueue``'s parameters)."""

    def wrap(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            if trace is None:
                return fn(*args, **kwargs)
            with span(name) as current:
                out = fn(*args, **kwargs)
                annotate(current, **_about(out))
                return out

        return call

    return wrap


def _about(out: Any) -> dict[str, Any]:
    if isinstance(out, list):
        return {"jobs": len(out)}
    cost = getattr(out, "cost", None)
    return {
        "job_id": getattr(out, "job_id", None),
        "kind": getattr(out, "kind", None),
        "status": str(getattr(out, "status", "")) or None,
        "estimated_usd": getattr(cost, "estimated_usd", None),
    }


def carrier() -> dict[str, str] | None:
    """The current span's W3C headers (``traceparent``, ``tracestate``), or None
    when no span is recording (no extra, no SDK, no span)."""
    if propagate is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers or None


def annotate(current: Any, **attributes: Any) -> None:
    """Set attributes on a span ``span`` yielded (None values left out)."""
    if current is not None:
        current.set_attributes(_clean(attributes))


def _span_context(headers: Mapping[str, Any] | None) -> Any:
    if not headers or propagate is None:
        return None
    found = trace.get_current_span(propagate.extract(dict(headers))).get_span_context()
    return found if found.is_valid else None


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes str, bool, int and float values; None is left out."""
    return {
        f"nw.{k}" if "." not in k else k: v
        for k, v in attributes.items()
        if isinstance(v, (str, bool, int, float))
    }


@contextlib.contextmanager
def attempt_span(record: Mapping[str, Any]) -> Iterator[Any]:
    """The span an attempt's body runs in: the child of the enqueue's stored
    span, linked to the run's first attempt when it is a retry."""
    if trace is None:  # without the extra: nothing to build (a worker runs this per job)
        yield None
        return
    from nw.jobs.core.records import attempt_in_run

    links = (record.get("trace_attempt"),) if record.get("trace_attempt") else ()
    attributes = {
        "job_id": record.get("job_id"),
        "kind": record.get("kind"),
        "attempt": attempt_in_run(record),
    }
    with span("nw.jobs.attempt", attributes, parent=record.get("trace"), links=links) as current:
        yield current


def attempt_ended(
    current: Any, record: Mapping[str, Any], ending_fields: Mapping[str, Any], decided: Any
) -> Any:
    """Annotate the attempt's span with how it ended and what it cost; returns
    ``decided`` with the span's headers kept for the run's next attempt to link
    to (a requeue, the first attempt of the run only)."""
    if current is None:
        return decided
    spent = {**record, **ending_fields}.get("actual_usd")
    prior = record.get("prior_actual_usd") or 0.0
    annotate(
        current,
        outcome=decided.ended,
        status=decided.au_status.value,
        error_kind=decided.fields.get("error_kind"),
        cost_usd=spent,
        cost_usd_total=None if spent is None else float(prior) + float(spent),
    )
    if not decided.requeued or record.get("trace_attempt"):
        return decided
    headers = carrier()
    if headers is None:
        return decided
    import dataclasses

    return dataclasses.replace(decided, fields={**decided.fields, "trace_attempt": headers})
