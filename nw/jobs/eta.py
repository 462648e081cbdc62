"""ETA: the key ladder, the prediction, and the per-read projection (pure, numpy).

Keys, most specific first: ``model|operation|bucket`` (bucket from the output
duration and ``dur_buckets_s``), ``model|operation``, then the coarse
``output_kind`` key, which means seconds *per unit*. A job declaring
``units = N > 1`` gets ``|xN`` on its specific keys.

``predict_total_s`` answers from the first key with ``n_min`` samples, else
from the prior for the output kind (``prior``: the UI says ``estimating…``).

Projection while running (``project_eta``): ``elapsed / fraction`` is the
observed-rate total once the render reports ``fraction`` or
``stage_index/stage_count``; it is blended with the learned p50 by the
fraction done (weight ``f`` on the observed rate), and replaces a cold prior
outright (confidence ``observed``). Past its p50 a job's total moves to p90;
past p90 the label says it is taking longer than usual. Computed ``pct`` never
exceeds ``pct_ceil`` and never falls below the persisted floor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from nw.jobs.model import DEFAULT_CONFIG, JobsConfig

ESTIMATING = "estimating…"
TAKING_LONGER = "taking longer than usual"
OUTPUT_KINDS = ("image", "video", "audio")
_KIND_HINTS = {
    "video": ("video", "animate", "i2v", "t2v", "animatic", "clip"),
    "audio": ("audio", "speech", "tts", "music", "song", "voice", "sound"),
    "image": ("image", "img", "picture", "photo", "panel", "t2i", "still"),
}


class Prediction(NamedTuple):
    p50: float
    p90: float
    confidence: str
    key: str | None


@dataclass(frozen=True)
class EtaPlan:
    """What a job's params say about its ETA (computed once, at enqueue)."""

    candidates: tuple[str, ...]
    output_kind: str | None
    units: int | None
    expected_cache_hit: bool = False

    @property
    def coarse_key(self) -> str | None:
        return self.output_kind


def infer_output_kind(params: Mapping[str, Any]) -> str | None:
    declared = params.get("output_kind")
    if isinstance(declared, str) and declared:
        return declared
    text = " ".join(
        str(params.get(k) or "") for k in ("operation", "tool", "model", "application")
    ).lower()
    for kind, hints in _KIND_HINTS.items():
        if any(h in text for h in hints):
            return kind
    return None


def duration_bucket(seconds: float, edges: Sequence[float]) -> str:
    lower = 0.0
    for edge in edges:
        if seconds <= edge:
            return f"{lower:g}-{edge:g}s"
        lower = edge
    return f"{lower:g}s+"


def eta_plan(params: Mapping[str, Any], units: int | None, config: JobsConfig) -> EtaPlan:
    model = params.get("model") or params.get("application")
    operation = params.get("operation") or params.get("tool")
    output_kind = infer_output_kind(params)
    suffix = f"|x{units}" if units and units > 1 else ""
    candidates: list[str] = []
    if model and operation:
        out_s = params.get("duration_s", params.get("duration"))
        if isinstance(out_s, (int, float)) and not isinstance(out_s, bool) and out_s > 0:
            bucket = duration_bucket(float(out_s), config.dur_buckets_s)
            candidates.append(f"{model}|{operation}|{bucket}{suffix}")
        candidates.append(f"{model}|{operation}{suffix}")
    if output_kind:
        candidates.append(output_kind)
    cache_hit = bool(params.get("expected_cache_hit", False))
    return EtaPlan(tuple(candidates), output_kind, units, cache_hit)


def predict_total_s(
    candidates: Sequence[str],
    output_kind: str | None,
    *,
    durations: Mapping[str, Sequence[float]],
    expected_cache_hit: bool = False,
    units: int | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Prediction:
    """(p50, p90, confidence[, key]) for a job's total seconds."""
    if expected_cache_hit:
        floor = config.cache_hit_floor_s
        return Prediction(floor, floor, "exact", None)
    scale = float(units or 1)
    for key in candidates:
        samples = durations.get(key) or ()
        if len(samples) < config.n_min:
            continue
        p50, p90 = _percentiles(samples, config)
        if key == output_kind:
            return Prediction(p50 * scale, p90 * scale, "learned_coarse", key)
        return Prediction(p50, p90, "learned", key)
    prior = config.prior_total_s.get(output_kind or "", config.default_prior_total_s)
    p50 = prior * scale
    return Prediction(p50, p50 * config.overrun_factor, "prior", None)


def _percentiles(samples: Sequence[float], config: JobsConfig) -> tuple[float, float]:
    values = np.asarray(samples[-config.sample_window_k :], dtype=float)
    p50 = float(np.median(values))
    p90 = float(np.percentile(values, 90)) if len(values) >= 10 else p50 * config.overrun_factor
    return p50, max(p90, p50)


@dataclass(frozen=True)
class EtaView:
    predicted_total_s: float | None
    remaining_s: float | None
    eta_s: float | None
    pct: float | None
    confidence: str | None
    label_hint: str | None


def observed_fraction(record: Mapping[str, Any]) -> float | None:
    fraction = record.get("fraction")
    if isinstance(fraction, (int, float)) and 0 < fraction <= 1:
        return float(fraction)
    index, count = record.get("stage_index"), record.get("stage_count")
    if isinstance(index, int) and isinstance(count, int) and count > 0 and index > 0:
        return min(index / count, 1.0)
    return None


def project_eta(
    record: Mapping[str, Any],
    status: str,
    *,
    elapsed_s: float | None,
    config: JobsConfig,
) -> EtaView:
    """The ETA fields of a job at one instant (pure)."""
    p50, p90 = record.get("eta_p50"), record.get("eta_p90")
    confidence = record.get("eta_confidence")
    floor = record.get("pct_floor")
    if status == "succeeded":
        return EtaView(p50, 0.0, 0.0, 100.0, confidence, None)
    if status in ("failed", "cancelled"):
        return EtaView(p50, None, None, floor, confidence, None)
    if p50 is None:
        return EtaView(None, None, None, None, None, ESTIMATING)
    if status == "queued" or elapsed_s is None:
        hint = ESTIMATING if confidence == "prior" else "queued"
        return EtaView(p50, p50, p50, None, confidence, hint)
    total = float(p50)
    fraction = observed_fraction(record)
    if fraction is not None and elapsed_s > 0:
        rate_total = elapsed_s / fraction
        if confidence == "prior":
            total, confidence = rate_total, "observed"
        else:
            total = (1.0 - fraction) * total + fraction * rate_total
    hint = None
    if elapsed_s > total:
        total = max(total, float(p90 or total * config.overrun_factor))
        if elapsed_s > total:
            total, hint = elapsed_s, TAKING_LONGER
    remaining = max(total - elapsed_s, 0.0)
    if confidence == "prior":
        return EtaView(total, remaining, remaining, None, confidence, ESTIMATING)
    pct = min(100.0 * elapsed_s / total, float(config.pct_ceil)) if total > 0 else 0.0
    if floor is not None:
        pct = max(pct, float(floor))
    pct = round(min(pct, float(config.pct_ceil)), 1)
    if hint is None:
        hint = f"about {_human(remaining)} left"
    return EtaView(total, remaining, remaining, pct, confidence, hint)


def _human(seconds: float) -> str:
    if seconds < 90:
        return f"{max(round(seconds), 1)}s"
    if seconds < 3600:
        return f"{round(seconds / 60)}m"
    return f"{seconds / 3600:.1f}h"
