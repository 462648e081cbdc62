"""How well the learned ETA predicts, against a plain median, on a seeded synthetic trace.

    PYTHONPATH=. python misc/bench/eta_accuracy.py [--jobs 2400] [--seed 7]
        [--stage-concentration 100]

The trace: 3 models x 2 operations (video, image and audio renders; the video
ones in two output-duration buckets), log-normal durations (sigma 0.15-0.35 per
key), every render 30% slower from half-way on, 10% cache hits (declared by
the plan, ~0.5 s, flagged ``cached``), a quarter of the image jobs batched
(``units`` 2, 3 or 4, declared), a few jobs that only name their output kind.
Renders report progress three ways: ``fraction`` every ~8% of the work on a
per-key curve that is not linear in time (f = u ** gamma, gamma 0.85-1.15,
plus noise); ``stage_index/stage_count`` with per-key unequal stage lengths
(each job's shares drawn around its key's profile, Dirichlet concentration
``--stage-concentration``, 100 by default: a job's slowness is mostly shared by
all its stages, each stage's share still wobbling ~15%); or nothing at all.
The learner sees each finished job's progress reports (as the event sink
hands them over) and so learns each key's progress curve.

Everything goes through the real code: the ``DurationLearningMiddleware``
(before/after compute on a simulated monotonic clock) writes samples into a
real ``SqliteJobStore`` in a temp dir; each submission asks ``eta_plan`` and
``predict_total_s`` about ``store.samples``; the 50%-progress read is
``records.to_job`` of the job's index record (``new_record`` plus the
progress fields the event sink would have written). Simulated time, no sleeps.

Printed per confidence level at submission (``exact`` = declared cache hit):
median absolute percentage error of ``predicted_total_s`` at submission and of
``remaining_s`` when half the job's real duration has passed, and p90 coverage
(share of jobs finishing within their p90). The baseline beside it is the
plain median: window median of the same keys, numpy's p90 once 10 samples,
remaining = median - elapsed. Then the drift and progress-blend choices,
measured on the same trace (only the predictor's config differs; the learned
samples do not depend on it).
"""

from __future__ import annotations

import argparse
import heapq
import math
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from au import ComputationResult, ComputationStatus

from nw.jobs.core import eta
from nw.jobs.core.limits import Limit
from nw.jobs.core.model import JobsConfig
from nw.jobs.core.records import JobRow, new_record, to_job
from nw.jobs.core.waits import Running, plan_starts
from nw.jobs.execution.learning import DurationLearningMiddleware
from nw.jobs.stores.sqlite import SqliteJobStore

CONFIG = JobsConfig()
# model, operation, output kind, base median seconds (for a 5 s clip when video), reporter
OPERATIONS = [
    ("kling", "image_to_video", "video", 70.0, "fraction"),
    ("kling", "text_to_video", "video", 95.0, "stages"),
    ("flux", "text_to_image", "image", 9.0, "stages"),
    ("flux", "image_edit", "image", 6.0, "fraction"),
    ("eleven", "text_to_speech", "audio", 14.0, "none"),
    ("eleven", "music", "audio", 40.0, "stages"),
]


@dataclass
class Sim:
    """One job of the trace: what it is, what it really takes, how it reports."""

    idx: int
    params: dict[str, Any]
    total: float
    reports: list[tuple[float, dict[str, Any]]]  # (seconds after start, stage fields)
    cached: bool
    submitted: float
    after_drift: bool
    op: int
    median: float  # the true median of this job's duration distribution
    out: dict[str, Any] = field(default_factory=dict)


def make_trace(n_jobs: int, seed: int, conc: float = 100.0) -> list[Sim]:
    rng = np.random.default_rng(seed)
    sigma = rng.uniform(0.15, 0.35, len(OPERATIONS))
    gamma = rng.uniform(0.85, 1.15, len(OPERATIONS))
    stage_n = rng.integers(3, 6, len(OPERATIONS))
    profile = [rng.dirichlet(np.full(int(k), 8.0)) for k in stage_n]
    jobs, now = [], 0.0
    for i in range(n_jobs):
        now += float(rng.exponential(25.0))
        op = int(rng.integers(len(OPERATIONS)))
        model, operation, kind, base, reporter = OPERATIONS[op]
        params: dict[str, Any] = {"model": model, "operation": operation}
        scale = 1.0
        if kind == "video":
            params["duration_s"] = int(rng.choice([5, 10]))
            scale = 1.0 if params["duration_s"] == 5 else 1.8
        if kind == "image" and rng.random() < 0.25:
            params["units"] = int(rng.choice([2, 4, 4, 3]))
            scale = params["units"] ** 0.9
        if kind == "image" and rng.random() < 0.05:
            # names nothing but its output kind (and its units, as it should)
            params = {
                "output_kind": "image",
                **({"units": params["units"]} if "units" in params else {}),
            }
        drift = 1.3 if i >= n_jobs // 2 else 1.0
        median = base * scale * drift
        total = median * float(np.exp(rng.normal(0.0, sigma[op])))
        cached = rng.random() < 0.10
        if cached:
            params["expected_cache_hit"] = True
            total = float(rng.uniform(0.2, 1.0))
        reports = [] if cached else _reports(rng, reporter, total, gamma[op], profile[op], conc)
        jobs.append(Sim(i, params, total, reports, cached, now, i >= n_jobs // 2, op, median))
    return jobs


def _reports(rng, reporter: str, total: float, gamma: float, profile, conc: float) -> list:
    if reporter == "fraction":
        out, last = [], 0.0
        for u in np.arange(0.08, 1.0, 0.08) + rng.uniform(-0.02, 0.02):
            f = min(max(u**gamma + rng.normal(0.0, 0.02), last), 1.0)
            out.append((u * total, {"fraction": round(float(f), 3)}))
            last = f
        return out
    if reporter == "stages":
        shares = rng.dirichlet(conc * profile)
        ends = np.cumsum(shares)[:-1]
        k = len(profile)
        return [
            (float(e) * total, {"stage_index": j + 1, "stage_count": k}) for j, e in enumerate(ends)
        ]
    return []


def _fraction(fields: dict[str, Any]) -> float | None:
    return eta.observed_fraction(fields)


# ----- the baseline: a plain window median -------------------------------------------
def baseline_predict(plan: eta.EtaPlan, durations) -> tuple[float, float, str]:
    scale = float(plan.units or 1)
    if plan.expected_cache_hit:
        return CONFIG.cache_hit_floor_s, CONFIG.cache_hit_floor_s, "exact"
    for key in plan.candidates:
        window = np.asarray(durations.get(key) or [], float)[-CONFIG.sample_window_k :]
        if len(window) >= CONFIG.n_min:
            p50 = float(np.median(window))
            p90 = float(np.percentile(window, 90)) if len(window) >= 10 else p50 * 1.5
            if key == plan.output_kind:
                return p50 * scale, p90 * scale, "learned_coarse"
            return p50, p90, "learned"
    prior = CONFIG.prior_total_s.get(plan.output_kind or "", CONFIG.default_prior_total_s)
    return prior * scale, prior * scale * 1.5, "prior"


# ----- the replay ----------------------------------------------------------------
VARIANTS = {
    "window median (no drift handling)": replace(CONFIG, recency_half_life=None, change_z=None),
    "recency only, half-life 4": replace(CONFIG, recency_half_life=4.0, change_z=None),
    "change detector only": replace(CONFIG, recency_half_life=None),
    "detector + half-life 8 (default)": CONFIG,
}
DEFAULT = "detector + half-life 8 (default)"
NOISES = (0.15, 0.3, 0.6)


def replay(jobs: list[Sim], store: SqliteJobStore) -> None:
    clock = [0.0]
    mw = DurationLearningMiddleware(
        record=lambda s: store.add_samples(s, now=clock[0], window=CONFIG.sample_window_k),
        config=CONFIG,
        clock=lambda: clock[0],
    )
    queue: list[tuple[float, int, str, Sim]] = []
    for job in jobs:
        heapq.heappush(queue, (job.submitted, job.idx, "submit", job))
    while queue:
        at, _, what, job = heapq.heappop(queue)
        clock[0] = at
        if what == "submit":
            _submit(job, store, at)
            mw.before_compute(None, (), {}, f"job{job.idx}")
            heapq.heappush(queue, (at + job.total / 2, job.idx, "half", job))
            heapq.heappush(queue, (at + job.total, job.idx, "finish", job))
        elif what == "half":
            _half(job, at)
        else:
            rec = job.out["record"]
            meta = {
                "eta_candidates": rec["eta_candidates"],
                "output_kind": rec["output_kind"],
                "units": rec["units"],
                "cached": job.cached,
                "progress": [[t / job.total, _fraction(f)] for t, f in job.reports],
            }
            mw.after_compute(
                f"job{job.idx}", ComputationResult({}, ComputationStatus.COMPLETED, metadata=meta)
            )


def _submit(job: Sim, store: SqliteJobStore, now: float) -> None:
    units = job.params.get("units")
    plan = eta.eta_plan(job.params, units, CONFIG)
    durations = store.samples(eta.sample_keys(plan), window=CONFIG.sample_window_k)
    kw = dict(expected_cache_hit=plan.expected_cache_hit, units=units)
    for name, cfg in VARIANTS.items():
        pred = eta.predict_total_s(
            plan.candidates, plan.output_kind, durations=durations, config=cfg, **kw
        )
        job.out[name] = pred
    pred = job.out[DEFAULT]
    job.out["record"] = new_record(
        job_id=f"job{job.idx}",
        kind="render",
        label="render",
        idempotency_key=str(job.idx),
        params=job.params,
        now=now,
        plan=plan,
        prediction=eta.prediction_fields(plan, durations, CONFIG),
        estimated_usd=None,
        runner="inproc",
        max_attempts=1,
    )
    job.out["record"]["started_at"] = now
    job.out["base"] = baseline_predict(plan, durations)


def _half(job: Sim, now: float) -> None:
    rec = dict(job.out["record"])
    start = rec["started_at"]
    for t, fields in job.reports:
        if t <= now - start:
            rec.update(fields, progress_at=start + t)
    for noise in NOISES:
        cfg = replace(CONFIG, progress_noise=noise)
        view = to_job(JobRow(rec, "running"), now, cfg)
        job.out[f"half{noise}"] = view
    job.out["half_observed"] = eta.observed_fraction(rec) is not None


# ----- the report ----------------------------------------------------------------
def _ape(pred, real) -> float:
    return abs(pred - real) / real


def _pct(values) -> str:
    return "   -  " if len(values) == 0 else f"{100 * float(np.median(values)):5.1f}%"


def _cov(flags) -> str:
    return "   -  " if len(flags) == 0 else f"{100 * float(np.mean(flags)):5.1f}%"


def table(jobs: list[Sim]) -> str:
    rows = defaultdict(lambda: defaultdict(list))
    for job in jobs:
        pred, base = job.out[DEFAULT], job.out["base"]
        half = job.out[f"half{CONFIG.progress_noise}"]
        groups = [pred.confidence, "all"]
        if pred.confidence in ("learned", "learned_coarse"):
            groups.append("learned, any")
        for g in groups:
            r = rows[g]
            r["sub"].append(_ape(pred.p50, job.total))
            r["bsub"].append(_ape(base[0], job.total))
            r["half"].append(_ape(half.remaining_s, job.total / 2))
            r["bhalf"].append(_ape(max(base[0] - job.total / 2, 0.0), job.total / 2))
            r["cov"].append(job.total <= pred.p90)
            r["bcov"].append(job.total <= base[1])
            r["obs"].append(job.out["half_observed"])
    lines = [
        "                  |      | at submission   | remaining at 50% | p90 coverage",
        "confidence        |    n |   eta  |  median |   eta  |  median |   eta  | median",
        "------------------+------+--------+---------+--------+---------+--------+-------",
    ]
    for g in ("prior", "learned", "learned_coarse", "exact", "learned, any", "all"):
        r = rows.get(g)
        if not r:
            continue
        lines.append(
            f"{g:17} | {len(r['sub']):4} | {_pct(r['sub'])} | {_pct(r['bsub'])}  |"
            f" {_pct(r['half'])} | {_pct(r['bhalf'])}  | {_cov(r['cov'])} | {_cov(r['bcov'])}"
        )
    return "\n".join(lines)


def drift_table(jobs: list[Sim]) -> str:
    """p50 against the true median, learned jobs: steady (first half) and the first 8
    runs of each key after the slow-down."""
    seen: dict[str, int] = defaultdict(int)
    after, steady, cov = defaultdict(list), defaultdict(list), defaultdict(list)
    for job in jobs:
        if job.cached:
            continue
        key = job.out[DEFAULT].key
        if job.after_drift:
            seen[key] += 1
        for name in VARIANTS:
            pred = job.out[name]
            if pred.confidence != "learned":
                continue
            cov[name].append(job.total <= pred.p90)
            if not job.after_drift:
                steady[name].append(_ape(pred.p50, job.median))
            elif seen[key] <= 8:
                after[name].append(_ape(pred.p50, job.median))
    lines = [
        "drift handling (learned keys)      | p50 vs true median: steady | first 8 after x1.3"
        " | p90 cov",
        "-----------------------------------+----------------------------+-------------------"
        "-+--------",
    ]
    for name in VARIANTS:
        lines.append(
            f"{name:34} |           {_pct(steady[name])}           |       {_pct(after[name])}"
            f"       | {_cov(cov[name])}"
        )
    return "\n".join(lines)


def step_table(seed: int, seeds: int = 60, sigma: float = 0.25) -> str:
    """One key, 20 steady runs, then a step: median error of p50 against the new median."""
    rng = np.random.default_rng(seed)
    lines = [
        f"step response, one key, sigma {sigma}, {seeds} seeds: median |p50 / new median - 1|",
        "after the step, by run                |  x2: 1     2     3     4     6     8"
        "  | x0.5: 1     2     3     4     6     8",
    ]
    runs = (1, 2, 3, 4, 6, 8)
    base = [np.exp(rng.normal(0.0, sigma, 20)) for _ in range(seeds)]
    noise = [np.exp(rng.normal(0.0, sigma, 8)) for _ in range(seeds)]
    for name, cfg in VARIANTS.items():
        cells = []
        for factor in (2.0, 0.5):
            errs = np.zeros((seeds, 9))
            for k in range(seeds):
                window = list(base[k])
                for j in range(9):
                    p50 = eta.predict_total_s(["k"], None, durations={"k": window}, config=cfg).p50
                    errs[k, j] = _ape(p50, factor)
                    if j < 8:
                        window = [*window, factor * noise[k][j]][-CONFIG.sample_window_k :]
            med = np.median(errs, axis=0)
            cells.append(" ".join(f"{100 * med[r]:4.0f}%" for r in runs))
        lines.append(f"{name:37} | {cells[0]} | {cells[1]}")
    return "\n".join(lines)


def noise_table(jobs: list[Sim]) -> str:
    lines = ["progress_noise | remaining at 50%, learned jobs reporting progress (median APE)"]
    for noise in NOISES:
        errs = [
            _ape(j.out[f"half{noise}"].remaining_s, j.total / 2)
            for j in jobs
            if j.out["half_observed"] and j.out[f"half{noise}"].confidence == "learned"
        ]
        mark = "  (default)" if noise == CONFIG.progress_noise else ""
        lines.append(f"{noise:14} | {_pct(errs)} of {len(errs)} jobs{mark}")
    return "\n".join(lines)


# ----- a queued job's ETA: its wait counted --------------------------------------
QUEUE_KEYS = {"fal:flux": 20.0, "fal:minimax": 60.0, "fal:kling": 120.0}  # true medians
QUEUE_LIMITS = {"fal:kling": Limit("fal:kling", 2, None)}  # the scarce provider


def _true_finishes(running, queue, slots, now=0.0):
    """When each queued job really ends: the workers' policy (claim order, a
    full key passed over, a free slot idles until something ends) replayed with
    the true durations. ``running``: (key, true end); ``queue``: (id, key, dur)."""
    live = [(end, key) for key, end in running]  # what runs: (end, key)
    free = sorted([end for end, _ in live] + [now] * max(slots - len(live), 0))[:slots]
    heapq.heapify(free)
    todo = list(queue)
    out = {}
    while todo:
        t = heapq.heappop(free)
        busy = Counter(key for end, key in live if end > t)
        pick = next(
            (
                job
                for job in todo
                if job[1] not in QUEUE_LIMITS or busy[job[1]] < QUEUE_LIMITS[job[1]].max_running
            ),
            None,
        )
        if pick is None:  # every queued job's key is full: idle until the next end
            heapq.heappush(free, min(end for end, _ in live if end > t))
            continue
        todo.remove(pick)
        end = t + pick[2]
        live.append((end, pick[1]))
        out[pick[0]] = end
        heapq.heappush(free, end)
    return out


def queued_table(seed: int, rounds: int = 200, slots: int = 6, backlog: int = 30) -> str:
    """Predicted time to finish of jobs queued behind a backlog: ``waits.plan_starts``
    (what ``to_job`` adds to a queued job's own run time) against the naive
    "own run time only", both against the replayed truth."""
    rng = np.random.default_rng(seed)
    keys = list(QUEUE_KEYS)
    err = {"nw": [], "naive": []}
    err_by_key: dict[str, dict[str, list]] = {k: {"nw": [], "naive": []} for k in keys}
    for _ in range(rounds):
        learned = {k: m * math.exp(rng.normal(0, 0.05)) for k, m in QUEUE_KEYS.items()}
        running, now_running = [], []
        for _slot in range(slots):
            key = keys[rng.integers(len(keys))]
            total = QUEUE_KEYS[key] * math.exp(rng.normal(0, 0.3))
            elapsed = total * rng.uniform(0, 0.9)
            running.append((key, total - elapsed))
            now_running.append(Running(key, max(learned[key] - elapsed, 0.05 * learned[key])))
        queue, rows = [], []
        for i in range(backlog):
            key = keys[rng.integers(len(keys))]
            dur = QUEUE_KEYS[key] * math.exp(rng.normal(0, 0.3))
            queue.append((f"q{i}", key, dur))
            rows.append(
                {
                    "job_id": f"q{i}",
                    "limit_key": key,
                    "queue_at": 0.0,
                    "eta_p50": learned[key],
                    "eta_confidence": "learned",
                }
            )
        limits_now = {
            k: Limit(k, lim.max_running, None, sum(1 for key, _ in running if key == k))
            for k, lim in QUEUE_LIMITS.items()
        }
        planned = plan_starts(rows, now_running, slots=slots, limits=limits_now, now=0.0)
        truth = _true_finishes(running, queue, slots)
        for row in rows:
            real = truth[row["job_id"]]
            nw_eta = planned[row["job_id"]].start_in_s + row["eta_p50"]
            for name, pred in (("nw", nw_eta), ("naive", row["eta_p50"])):
                err[name].append(_ape(pred, real))
                err_by_key[row["limit_key"]][name].append(_ape(pred, real))
    lines = [
        f"queued behind a backlog: {rounds} rounds, {slots} worker slots, {backlog} queued, "
        "fal:kling limited to 2 running; median APE of the time to finish",
        "jobs                      |     n |  nw (wait + run) | naive (own run only)",
        "--------------------------+-------+------------------+---------------------",
    ]
    for label, got in [*((f"key {k}", v) for k, v in err_by_key.items()), ("all", err)]:
        lines.append(
            f"{label:<26}| {len(got['nw']):5d} | {_pct(got['nw']):>16} | {_pct(got['naive']):>19}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2400)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--stage-concentration",
        type=float,
        default=100.0,
        help="Dirichlet concentration of a job's stage shares around its key's profile "
        "(lower: stages vary more from job to job)",
    )
    ap.add_argument("--only", choices=["queued"], help="only the queued-ETA table")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.only == "queued":
        print(queued_table(args.seed))
        return 0
    jobs = make_trace(args.jobs, args.seed, args.stage_concentration)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteJobStore(Path(tmp) / "jobs.sqlite")
        try:
            replay(jobs, store)
        finally:
            store.close()
    print(
        f"eta accuracy: {len(jobs)} jobs, seed {args.seed}, 30% slow-down from job "
        f"{len(jobs) // 2}; eta = nw.jobs, median = plain window median\n"
    )
    print(table(jobs))
    print()
    print(drift_table(jobs))
    print()
    print(step_table(args.seed))
    print()
    print(noise_table(jobs))
    print()
    print(queued_table(args.seed))
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
