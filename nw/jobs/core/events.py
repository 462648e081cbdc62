"""What a render's event or result changes in the job's record (pure).

An event is mirrored field by field: the stage fields (``index`` and
``transform`` are accepted aliases; the canonical name wins when both are
given; ``stage_index`` is the number of stages finished, i.e. the 0-based
index of the stage now starting), a ``cache_hit`` marks the job cached,
costs travel with their honesty flag, an artifact id is kept, and a
provider request id is remembered so a retried attempt can resume instead of
paying again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

STAGE_FIELDS = ("stage_index", "stage_count", "current_transform", "fraction")
_ALIASES = {"index": "stage_index", "transform": "current_transform"}


def event_kind(event: Mapping[str, Any]) -> str | None:
    kind = event.get("kind") or event.get("type") or event.get("event")
    return kind if isinstance(kind, str) else None


def artifact_of(payload: Mapping[str, Any]) -> str | None:
    """``artifact_ref``, or the first field named ``*_artifact_id``."""
    ref = payload.get("artifact_ref")
    if ref is None:
        for key in sorted(payload):
            if key.endswith("_artifact_id") and payload[key] is not None:
                ref = payload[key]
                break
    return None if ref is None else str(ref)


def _unknown_flag(current: bool | None, reported: Any) -> bool | None:
    """Lower-bound is sticky: once an unknown cost was reported it stays True."""
    if reported is None:
        return current
    return bool(current or bool(reported))


def _money(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def cost_patch(record: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """The cost fields an event or a terminal result reports, the same on both paths.

    The actual is ``actual_usd`` (or ``cost_usd_actual``); the honesty flag is
    ``has_unknown_costs`` (or ``actual_is_lower_bound``). An actual that is
    reported but is not a finite non-negative number is an unknown cost: it
    is dropped and the actual becomes a lower bound.
    """
    patch: dict[str, Any] = {}
    reported = [payload[k] for k in ("actual_usd", "cost_usd_actual") if k in payload]
    if reported:
        actual = _money(reported[0])
        if actual is not None:
            patch["actual_usd"] = actual
    savings = _money(payload.get("cache_hit_savings_usd"))
    if savings is not None:
        patch["cache_hit_savings_usd"] = savings
    flags = [payload.get(k) for k in ("has_unknown_costs", "actual_is_lower_bound")]
    flags = [f for f in flags if f is not None]
    said = any(bool(f) for f in flags) if flags else None
    if reported and reported[0] is not None and _money(reported[0]) is None:
        said = True
    flag = _unknown_flag(record.get("actual_is_lower_bound"), said)
    if flag is not None and flag != record.get("actual_is_lower_bound"):
        patch["actual_is_lower_bound"] = flag
    return patch


def event_patch(record: Mapping[str, Any], event: Any) -> dict[str, Any]:
    """The record fields an event changes (may be empty)."""
    if not isinstance(event, Mapping):
        return {}
    patch: dict[str, Any] = {}
    for alias, canonical in _ALIASES.items():
        if alias in event and canonical not in event:
            patch[canonical] = event[alias]
    for name in STAGE_FIELDS:
        if name in event:
            patch[name] = event[name]
    if isinstance(patch.get("fraction"), (int, float)):
        patch["fraction"] = min(max(float(patch["fraction"]), 0.0), 1.0)
    kind = event_kind(event)
    if kind == "cache_hit" or event.get("cache_hit") is True:
        patch["cached"] = True
    patch |= cost_patch(record, event)
    ref = artifact_of(event)
    if ref is not None:
        patch["artifact_ref"] = ref
    if kind == "provider.submitted" and event.get("request_id") is not None:
        patch["resume"] = {"request_id": str(event["request_id"])}
    if event.get("event_id") is not None:
        patch["last_event_id"] = str(event["event_id"])
    return patch


def result_patch(record: Mapping[str, Any], result: Any) -> dict[str, Any]:
    """Reconcile a terminal result into cost and artifact fields."""
    if not isinstance(result, Mapping):
        return {}
    patch = cost_patch(record, result)
    if record.get("actual_is_lower_bound") is not None:
        patch.setdefault("actual_is_lower_bound", record["actual_is_lower_bound"])
    if result.get("cache_hit") is True:
        patch["cached"] = True
    ref = artifact_of(result)
    if ref is not None:
        patch["artifact_ref"] = ref
    return patch


def progress_beat(event: Mapping[str, Any], now: float) -> dict[str, Any] | None:
    """A progress-trail entry for an event that reports progress, else None."""
    stage = {k: event[k] for k in (*STAGE_FIELDS, *_ALIASES) if k in event}
    pct = event.get("pct")
    message = event.get("message")
    if not stage and pct is None and message is None:
        return None
    if pct is None:
        fraction = event.get("fraction")
        index, count = (
            event.get("stage_index", event.get("index")),
            event.get("stage_count"),
        )
        if isinstance(fraction, (int, float)):
            pct = 100.0 * float(fraction)
        elif isinstance(index, int) and isinstance(count, int) and count > 0:
            pct = 100.0 * index / count
    return {
        "ts": now,
        "pct": None if pct is None else round(float(pct), 2),
        "message": None if message is None else str(message)[:500],
        "stage": stage or None,
    }


#: What one attempt's progress leaves in the record; a requeued job reads from
#: zero again (not "3 of 4 done" from the attempt that was lost).
PROGRESS_FIELDS = (
    "stage_index", "stage_count", "current_transform", "fraction", "progress_at", "pct_floor",
    "overdue_at",
)  # fmt: skip


def requeue_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """Fields for a requeue: the attempt's progress cleared, its spend carried."""
    cleared = {name: None for name in PROGRESS_FIELDS if record.get(name) is not None}
    return {**cleared, **carry_cost(record)}


def stages_done(record: Mapping[str, Any]) -> dict[str, Any]:
    """Fields for a success: every declared stage is done (the body emitted the
    index of its last stage when that stage began)."""
    count = record.get("stage_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return {"stage_index": count}
    return {}


def carry_cost(record: Mapping[str, Any]) -> dict[str, Any]:
    """Fields for a requeue: what this attempt spent is kept as spent by
    earlier attempts, so a retried job's actual is the sum over attempts."""
    spent = record.get("actual_usd")
    if not isinstance(spent, (int, float)) or isinstance(spent, bool):
        return {}
    prior = record.get("prior_actual_usd") or 0.0
    return {"prior_actual_usd": float(prior) + float(spent), "actual_usd": None}


def total_actual(record: Mapping[str, Any]) -> float | None:
    prior, now = record.get("prior_actual_usd"), record.get("actual_usd")
    if prior is None:
        return now
    return float(prior) + float(now or 0.0)
