"""ETA: the key ladder, the prediction, and the per-read projection (pure, numpy).

This module owns how long a job is expected to take and how far along it is:
the ETA keys of a job (``sample_keys``), ``predict_total_s`` (p50, p90 and a
confidence from a key's learned durations, or a prior), the prediction fields
a record carries, learned progress curves, and ``project_eta`` (one read of a
running job: remaining time, ``pct``, label hint). The mathematics, and the
measurements behind its choices, are in ``misc/eta.md``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:  # numpy is imported where it is used: a worker process starts without it
    import numpy as np

from nw.jobs.core.model import DEFAULT_CONFIG, JobsConfig

ESTIMATING = "estimating…"
TAKING_LONGER = "taking longer than usual"
OUTPUT_KINDS = ("image", "video", "audio")
_KIND_HINTS = {
    "video": ("video", "animate", "i2v", "t2v", "animatic", "clip"),
    "audio": ("audio", "speech", "tts", "music", "song", "voice", "sound"),
    "image": ("image", "img", "picture", "photo", "panel", "t2i", "still"),
}
_NORMAL = NormalDist()
_Z90 = _NORMAL.inv_cdf(0.9)
_MIN_S = 1e-3  # seconds: a sample or a total is never taken as <= 0
_MIN_SIGMA = 0.02  # log-sd floor: no prediction is ever certain to the millisecond
_MIN_SCALE = 0.05  # log-sd floor of the change detector's noise estimate


class Prediction(tuple):
    """``(p50, p90, confidence)``, the documented triple; ``.key`` names the
    ETA key that answered (None for a prior or an exact cache hit)."""

    key: str | None

    def __new__(cls, p50: float, p90: float, confidence: str, key: str | None = None) -> Prediction:
        obj = super().__new__(cls, (p50, p90, confidence))
        obj.key = key
        return obj

    @property
    def p50(self) -> float:
        return self[0]

    @property
    def p90(self) -> float:
        return self[1]

    @property
    def confidence(self) -> str:
        return self[2]

    def __repr__(self) -> str:
        p50, p90, confidence = self
        return f"Prediction({p50=!r}, {p90=!r}, {confidence=!r}, key={self.key!r})"


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


# ----- keys ----------------------------------------------------------------------
def infer_output_kind(params: Mapping[str, Any]) -> str | None:
    declared = params.get("output_kind")
    if isinstance(declared, str) and declared:
        return declared
    text = " ".join(
        str(params.get(k) or "") for k in ("operation", "tool", "model", "application")
    ).lower()
    if text.isspace():  # none of them: no hint to find (most of a batch of plain jobs)
        return None
    for kind, hints in _KIND_HINTS.items():
        if any(h in text for h in hints):
            return kind
    return None


def duration_bucket(seconds: float, edges: Sequence[float]) -> str:
    """``"4-8s"`` for 6 s with edges (4, 8, 12); an edge belongs to the lower bucket."""
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
        if _positive_number(out_s):
            bucket = duration_bucket(float(out_s), config.dur_buckets_s)
            candidates.append(f"{model}|{operation}|{bucket}{suffix}")
        candidates.append(f"{model}|{operation}{suffix}")
    if output_kind and output_kind not in candidates:
        candidates.append(output_kind)
    cache_hit = params.get("expected_cache_hit") is True
    return EtaPlan(tuple(candidates), output_kind, units, cache_hit)


def _positive_number(value: Any) -> TypeGuard[float]:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


# ----- prediction ----------------------------------------------------------------
def predict_total_s(
    eta_candidates: Sequence[str],
    output_kind: str | None,
    *,
    durations: Mapping[str, Sequence[float]],
    expected_cache_hit: bool = False,
    units: int | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Prediction:
    """(p50, p90, confidence, key) for a job's total seconds."""
    if expected_cache_hit:
        floor = config.cache_hit_floor_s
        return Prediction(floor, floor, "exact", None)
    scale = float(units or 1)
    for key in eta_candidates:
        samples = _learned(durations.get(key), config)
        if samples is None:
            continue
        p50, p90 = sample_percentiles(samples, config)
        if key == output_kind:
            return Prediction(p50 * scale, p90 * scale, "learned_coarse", key)
        return Prediction(p50, p90, "learned", key)
    prior = config.prior_total_s.get(output_kind or "", config.default_prior_total_s)
    p50 = prior * scale
    return Prediction(p50, p50 * config.overrun_factor, "prior", None)


def _learned(samples: Sequence[float] | None, config: JobsConfig) -> np.ndarray | None:
    """A key's usable samples (``_clean``) when there are at least ``n_min``,
    else None. Cleaning only drops values, so too few are not cleaned: a key
    with nothing learned does not import numpy (0.2 s, which the first
    enqueue of a process paid for a kind never run)."""
    if samples is None or len(samples) < config.n_min:
        return None
    values = _clean(samples, config.sample_window_k)
    return values if len(values) >= config.n_min else None


def _clean(samples: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    import numpy as np

    values = np.asarray(list(samples)[-window:], dtype=float)
    values = values[np.isfinite(values)]
    return np.maximum(values, _MIN_S)


def sample_percentiles(
    samples: Sequence[float] | np.ndarray, config: JobsConfig
) -> tuple[float, float]:
    """(p50, p90) of one key's samples (oldest first), drift-corrected (see module doc)."""
    import numpy as np

    y = np.log(_clean(samples, config.sample_window_k))
    n = len(y)
    if n == 0:
        raise ValueError("no samples")
    if config.change_z is not None:
        split = change_point(y, config.change_z)
        if split is not None:
            y = y.copy()
            y[:split] += np.median(y[split:]) - np.median(y[:split])
    if config.recency_half_life is None:
        weights = np.ones(n)
    else:
        weights = 0.5 ** ((n - 1 - np.arange(n)) / config.recency_half_life)
    p50 = math.exp(weighted_quantile(y, weights, 0.5))
    if n >= config.p90_min_samples:
        p90 = math.exp(weighted_quantile(y, weights, 0.9))
    else:
        p90 = p50 * config.overrun_factor
    return p50, max(p90, p50)


def change_point(y: Sequence[float] | np.ndarray, threshold: float) -> int | None:
    """Index where the newest level starts, if a shift's robust z exceeds ``threshold``.

    Plain Python on purpose: the window is ~20 samples and this runs on every
    enqueue and start, where numpy's per-call overhead on tiny arrays cost
    milliseconds (measured: 2.3 ms with numpy, about 0.1 ms like this).
    """
    vals = [float(v) for v in y]
    n = len(vals)
    best_z, best_split = 0.0, None
    for split in range(3, n - 1):
        old, new = vals[:split], vals[split:]
        mid_old, mid_new = statistics.median(old), statistics.median(new)
        spread = statistics.median(
            [abs(v - mid_old) for v in old] + [abs(v - mid_new) for v in new]
        )
        scale = max(1.4826 * spread, _MIN_SCALE)
        shift = abs(sum(new) / len(new) - sum(old) / len(old))
        z = shift / (scale * math.sqrt(1 / len(old) + 1 / len(new)))
        if z > best_z:
            best_z, best_split = z, split
    return best_split if best_z > threshold else None


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Quantile with Weibull plotting positions: cumulative weight / (total + newest).

    Unweighted, position i / (n + 1): the median is the median, and a new
    sample exceeds the 0.9 quantile 10% of the time. Beyond the largest
    position the largest value is the answer (no extrapolation).
    """
    import numpy as np

    order = np.argsort(values, kind="stable")
    v = np.asarray(values, dtype=float)[order]
    w = np.asarray(weights, dtype=float)[order] / float(np.max(weights))
    positions = np.cumsum(w) / (w.sum() + 1.0)
    return float(np.interp(q, positions, v))


# ----- progress calibration ------------------------------------------------------
PROGRESS_BINS = 10
"""Reported progress is calibrated per tenth: bin b holds fractions in [b/10, (b+1)/10)."""


def progress_bin(fraction: float) -> int:
    return min(int(fraction * PROGRESS_BINS + 1e-9), PROGRESS_BINS)


def progress_key(key: str, bin_: int) -> str:
    """The sample key holding, for ``key``, time share / reported fraction in one bin."""
    return f"{key}@p{bin_}"


def specific_keys(plan: EtaPlan) -> list[str]:
    return [k for k in plan.candidates if k != plan.output_kind]


def progress_keys(plan: EtaPlan) -> list[str]:
    """Sample keys ``progress_curve`` reads (the facade fetches them at enqueue)."""
    return [progress_key(k, b) for k in specific_keys(plan) for b in range(PROGRESS_BINS + 1)]


def progress_curve(
    plan: EtaPlan, samples: Mapping[str, Sequence[float]], config: JobsConfig
) -> dict[str, Any] | None:
    """How this kind of render's reported progress runs against its clock, for the record.

    From the most specific key with any bin of ``n_min`` samples: per bin, the
    median ratio rho = (share of the total time elapsed) / (reported fraction)
    and the log-sd of rho across runs. None when nothing is learned yet.
    """
    for key in specific_keys(plan):
        bins: dict[str, list[float]] = {}
        for b in range(PROGRESS_BINS + 1):
            values = _learned(samples.get(progress_key(key, b)), config)
            if values is None:
                continue
            import numpy as np

            y = np.log(values)
            mid = float(np.median(y))
            spread = 1.4826 * float(np.median(np.abs(y - mid)))
            bins[str(b)] = [round(math.exp(mid), 6), round(spread, 6), len(values)]
        if bins:
            return {"key": key, "bins": bins}
    return None


def _calibrated(record: Mapping[str, Any], f: float, config: JobsConfig) -> tuple[float, float]:
    """(time share reached at reported fraction f, log-sd of the rate total it implies)."""
    prior_sd = config.progress_noise * math.sqrt((1.0 - f) / f) if f < 1 else 0.0
    curve = record.get("eta_progress")
    cell = None
    if isinstance(curve, Mapping) and isinstance(curve.get("bins"), Mapping):
        cell = curve["bins"].get(str(progress_bin(f)))
    if not (isinstance(cell, (list, tuple)) and len(cell) == 3 and all(map(_number, cell))):
        return f, prior_sd
    rho, spread, n = (float(v) for v in cell)
    # shrink the measured spread toward the prior's while few runs stand behind it
    sd = math.sqrt((n * spread**2 + 2.0 * prior_sd**2) / (n + 2.0))
    return min(max(rho, 0.0) * f, 1.0), sd


# ----- projection ----------------------------------------------------------------
@dataclass(frozen=True)
class EtaView:
    predicted_total_s: float | None
    remaining_s: float | None
    eta_s: float | None
    pct: float | None
    confidence: str | None
    label_hint: str | None


def observed_fraction(record: Mapping[str, Any]) -> float | None:
    """Share of the work the render says is done: ``fraction``, else stages done / count."""
    fraction = record.get("fraction")
    if _positive_number(fraction) and fraction <= 1:
        return float(fraction)
    index, count = record.get("stage_index"), record.get("stage_count")
    if _is_int(index) and _is_int(count) and count > 0 and index > 0:
        return min(index / count, 1.0)
    return None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def observed_rate_total(
    record: Mapping[str, Any], elapsed_s: float, config: JobsConfig = DEFAULT_CONFIG
) -> tuple[float, float] | None:
    """(R, log-sd of R): the total the reported progress implies, and how far to trust it."""
    f = observed_fraction(record)
    if f is None or elapsed_s <= 0:
        return None
    t_f = elapsed_s
    started, at = record.get("started_at"), record.get("progress_at")
    if _number(started) and _number(at):
        if at < started:  # reported by an earlier attempt: says nothing about this one
            return None
        t_f = min(float(at) - float(started), elapsed_s)
    share, sd = _calibrated(record, f, config)
    if t_f <= 0 or share <= 0:
        return None
    total = t_f / share
    index, count = record.get("stage_index"), record.get("stage_count")
    uses_stages = not (_positive_number(record.get("fraction")) and record["fraction"] <= 1)
    if uses_stages and _is_int(index) and _is_int(count) and index < count:
        next_share, _ = _calibrated(record, (index + 1) / count, config)
        if next_share > 0:  # the next stage has not been reported done yet
            total = max(total, elapsed_s / next_share)
    return total, max(sd, _MIN_SIGMA)


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def conditional_median(mu: float, sigma: float, elapsed_s: float) -> float:
    """Median of T ~ logN(mu, sigma) given T > elapsed_s."""
    if elapsed_s <= 0:
        return math.exp(mu)
    z = (math.log(elapsed_s) - mu) / sigma
    if z > 8.0:  # deep in the tail: Mills-ratio asymptote, log T - log e ~ Exp(z / sigma)
        return elapsed_s * math.exp(sigma * math.log(2.0) / z)
    tail = _NORMAL.cdf(-z)  # P(T > e)
    return math.exp(mu - sigma * _NORMAL.inv_cdf(tail / 2.0))


def _history(
    record: Mapping[str, Any], elapsed_s: float, config: JobsConfig
) -> tuple[float, float, Any]:
    """(p50, p90, confidence) to project from; an 'exact' cache-hit guess that
    has clearly missed falls back to the prior it stood in for."""
    p50, p90 = float(record["eta_p50"]), record.get("eta_p90")
    confidence = record.get("eta_confidence")
    p90 = float(p90) if _number(p90) else p50 * config.overrun_factor
    if confidence == "exact" and elapsed_s > max(p90, p50) * config.overrun_factor:
        kind = record.get("output_kind") or ""
        units = record.get("units") if _is_int(record.get("units")) else 1
        p50 = config.prior_total_s.get(kind, config.default_prior_total_s) * (units or 1)
        p90, confidence = p50 * config.overrun_factor, "prior"
    return max(p50, _MIN_S), max(p90, p50, _MIN_S), confidence


def project_eta(
    record: Mapping[str, Any],
    status: str,
    *,
    elapsed_s: float | None,
    config: JobsConfig,
) -> EtaView:
    """The ETA fields of a job at one instant (pure)."""
    p50 = record.get("eta_p50")
    confidence = record.get("eta_confidence")
    floor = record.get("pct_floor")
    if status == "succeeded":
        return EtaView(p50, 0.0, 0.0, 100.0, confidence, None)
    if status in ("failed", "cancelled"):
        return EtaView(p50, None, None, floor, confidence, None)
    if not _number(p50):
        return EtaView(None, None, None, None, None, ESTIMATING)
    if status == "queued" or elapsed_s is None:
        hint = ESTIMATING if confidence == "prior" else "queued"
        return EtaView(p50, p50, p50, None, confidence, hint)
    elapsed = max(float(elapsed_s), 0.0)
    p50, p90, confidence = _history(record, elapsed, config)
    mu = math.log(p50)
    sigma = max(math.log(p90 / p50) / _Z90, _MIN_SIGMA)
    usual_p90 = p90
    observed = observed_rate_total(record, elapsed, config)
    if observed is not None:
        rate_total, obs_sigma = observed
        if confidence == "prior":
            mu, sigma, confidence = math.log(max(rate_total, _MIN_S)), obs_sigma, "observed"
            usual_p90 = math.exp(mu + _Z90 * sigma)
        else:
            w_h, w_o = 1.0 / sigma**2, 1.0 / obs_sigma**2
            mu = (w_h * mu + w_o * math.log(max(rate_total, _MIN_S))) / (w_h + w_o)
            sigma = max(math.sqrt(1.0 / (w_h + w_o)), _MIN_SIGMA)
    total = max(conditional_median(mu, sigma, elapsed), elapsed)
    remaining = total - elapsed
    if confidence == "prior":
        return EtaView(total, remaining, remaining, None, confidence, ESTIMATING)
    pct = min(100.0 * elapsed / total, float(config.pct_ceil)) if total > 0 else 0.0
    if _number(floor):
        pct = max(pct, float(floor))
    pct = round(min(pct, float(config.pct_ceil)), 1)
    hint = TAKING_LONGER if elapsed > usual_p90 else f"about {_human(remaining)} left"
    return EtaView(total, remaining, remaining, pct, confidence, hint)


def _human(seconds: float) -> str:
    if seconds < 90:
        return f"{max(round(seconds), 1)}s"
    if seconds < 3600:
        return f"{round(seconds / 60)}m"
    return f"{seconds / 3600:.1f}h"


def sample_keys(plan: EtaPlan) -> list[str]:
    """Every sample key a prediction for this plan reads."""
    return [*plan.candidates, *progress_keys(plan)]


def plan_of_record(record: Mapping[str, Any]) -> EtaPlan:
    return EtaPlan(
        tuple(record.get("eta_candidates") or ()),
        record.get("output_kind"),
        record.get("units"),
        bool(record.get("expected_cache_hit")),
    )


def prediction_fields(
    plan: EtaPlan, samples: Mapping[str, Sequence[float]], config: JobsConfig
) -> dict[str, Any]:
    """The record fields a prediction writes (at enqueue, again at the start)."""
    p = predict_total_s(
        plan.candidates,
        plan.output_kind,
        durations=samples,
        expected_cache_hit=plan.expected_cache_hit,
        units=plan.units,
        config=config,
    )
    return {
        "eta_p50": p.p50,
        "eta_p90": p.p90,
        "eta_confidence": p.confidence,
        "eta_key": p.key,
        "eta_progress": progress_curve(plan, samples, config),
    }
