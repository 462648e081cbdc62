"""The ETA core: key ladder, buckets, prediction, drift, and the per-read projection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nw.jobs.core import eta
from nw.jobs.core.eta import ESTIMATING, TAKING_LONGER, predict_total_s, project_eta
from nw.jobs.core.model import JobsConfig

CFG = JobsConfig()
PLAIN = JobsConfig(recency_half_life=None, change_z=None)  # window statistics, no drift


# ----- key ladder and buckets --------------------------------------------------------
def test_ladder_runs_from_bucket_to_operation_to_output_kind():
    plan = eta.eta_plan(
        {"model": "kling", "operation": "image_to_video", "duration_s": 6}, None, CFG
    )
    assert plan.candidates == ("kling|image_to_video|4-8s", "kling|image_to_video", "video")
    assert plan.output_kind == "video"
    assert plan.coarse_key == "video"


def test_application_and_tool_stand_in_for_model_and_operation():
    plan = eta.eta_plan({"application": "flux", "tool": "text_to_image"}, None, CFG)
    assert plan.candidates == ("flux|text_to_image", "image")


def test_units_suffix_only_on_specific_keys_and_only_above_one():
    params = {"model": "flux", "operation": "text_to_image", "duration_s": 2}
    four = eta.eta_plan(params, 4, CFG)
    assert four.candidates == ("flux|text_to_image|0-4s|x4", "flux|text_to_image|x4", "image")
    one = eta.eta_plan(params, 1, CFG)
    assert one.candidates == ("flux|text_to_image|0-4s", "flux|text_to_image", "image")


def test_without_model_or_operation_only_the_coarse_key_remains():
    assert eta.eta_plan({"output_kind": "audio"}, None, CFG).candidates == ("audio",)
    assert eta.eta_plan({"model": "wan-video"}, None, CFG).candidates == ("video",)
    assert eta.eta_plan({"prompt": "a cat"}, None, CFG).candidates == ()


@pytest.mark.parametrize(
    ("params", "kind"),
    [
        ({"operation": "text_to_speech"}, "audio"),
        ({"operation": "image_to_video"}, "video"),
        ({"tool": "panel.render"}, "image"),
        ({"operation": "image_to_video", "output_kind": "image"}, "image"),  # declared wins
        ({"operation": "summarize"}, None),
    ],
)
def test_output_kind_is_inferred_unless_declared(params, kind):
    assert eta.infer_output_kind(params) == kind


@pytest.mark.parametrize(
    ("seconds", "bucket"),
    [(0.5, "0-4s"), (4.0, "0-4s"), (4.01, "4-8s"), (8, "4-8s"), (12, "8-12s"), (30, "12s+")],
)
def test_buckets_put_an_edge_in_the_lower_bucket(seconds, bucket):
    assert eta.duration_bucket(seconds, (4.0, 8.0, 12.0)) == bucket


@pytest.mark.parametrize("bad", [True, 0, -5, float("nan"), float("inf"), "6"])
def test_a_nonsense_output_duration_gets_no_bucket_key(bad):
    plan = eta.eta_plan({"model": "m", "operation": "o", "duration_s": bad}, None, CFG)
    assert plan.candidates == ("m|o",)


def test_expected_cache_hit_must_be_literally_true():
    assert eta.eta_plan({"expected_cache_hit": True}, None, CFG).expected_cache_hit
    assert not eta.eta_plan({"expected_cache_hit": "no"}, None, CFG).expected_cache_hit


# ----- prediction --------------------------------------------------------------------
KEYS = ("m|o|4-8s", "m|o", "video")


def test_the_first_key_with_n_min_samples_wins_even_if_a_coarser_one_has_more():
    durations = {"m|o|4-8s": [10.0, 10.0, 10.0], "m|o": [50.0] * 20, "video": [99.0] * 20}
    pred = predict_total_s(KEYS, "video", durations=durations, config=CFG)
    assert pred.confidence == "learned"
    assert pred.key == "m|o|4-8s"
    assert pred.p50 == pytest.approx(10.0)


def test_a_key_below_n_min_backs_off_to_the_next():
    durations = {"m|o|4-8s": [10.0, 10.0], "m|o": [50.0, 50.0, 50.0]}
    pred = predict_total_s(KEYS, "video", durations=durations, config=CFG)
    assert (pred.key, pred.p50) == ("m|o", pytest.approx(50.0))


def test_nonfinite_samples_do_not_count_toward_n_min():
    durations = {"m|o": [50.0, float("nan"), float("inf")]}
    pred = predict_total_s(KEYS, "video", durations=durations, units=None, config=CFG)
    assert pred.confidence == "prior"


def test_the_coarse_key_is_per_unit_and_scaled_by_units():
    durations = {"video": [10.0, 10.0, 10.0]}
    pred = predict_total_s(KEYS, "video", durations=durations, units=3, config=CFG)
    assert pred.confidence == "learned_coarse"
    assert pred.p50 == pytest.approx(30.0)
    assert pred.p90 == pytest.approx(30.0 * CFG.overrun_factor)


def test_a_specific_learned_key_is_whole_job_and_not_scaled():
    durations = {"m|o|x3": [30.0, 30.0, 30.0]}
    pred = predict_total_s(("m|o|x3", "video"), "video", durations=durations, units=3, config=CFG)
    assert (pred.confidence, pred.p50) == ("learned", pytest.approx(30.0))


def test_the_prior_is_per_unit_and_flagged_prior():
    pred = predict_total_s(KEYS, "image", durations={}, units=4, config=CFG)
    assert pred.confidence == "prior"
    assert pred.p50 == pytest.approx(4 * CFG.prior_total_s["image"])
    assert pred.key is None
    unknown = predict_total_s((), None, durations={}, config=CFG)
    assert unknown.p50 == pytest.approx(CFG.default_prior_total_s)


def test_an_all_cache_hit_plan_is_exact_at_the_floor():
    durations = {"m|o": [50.0] * 5}
    pred = predict_total_s(KEYS, "video", durations=durations, expected_cache_hit=True, config=CFG)
    assert pred == (CFG.cache_hit_floor_s, CFG.cache_hit_floor_s, "exact") and pred.key is None


def test_p90_is_synthesized_below_p90_min_samples_and_real_from_it():
    few = [10.0, 11.0, 12.0, 13.0, 14.0]
    pred = predict_total_s(("k",), None, durations={"k": few}, config=PLAIN)
    assert pred.p90 == pytest.approx(pred.p50 * PLAIN.overrun_factor)
    many = [float(v) for v in range(1, 20)]  # 19 samples: Weibull rank 0.9 * 20 = 18
    pred = predict_total_s(("k",), None, durations={"k": many}, config=PLAIN)
    assert pred.p50 == pytest.approx(10.0)
    assert pred.p90 == pytest.approx(18.0)


def test_only_the_newest_window_is_read():
    old_then_new = [1000.0] * 30 + [10.0] * CFG.sample_window_k
    pred = predict_total_s(("k",), None, durations={"k": old_then_new}, config=PLAIN)
    assert pred.p50 == pytest.approx(10.0)


def test_unweighted_quantile_matches_the_median_and_weibull_positions():
    v = np.array([5.0, 1.0, 3.0, 2.0])
    assert eta.weighted_quantile(v, np.ones(4), 0.5) == pytest.approx(np.median(v))
    assert eta.weighted_quantile(v, np.ones(4), 0.99) == 5.0  # no extrapolation
    v = np.arange(1.0, 10.0)
    assert eta.weighted_quantile(v, np.ones(9), 0.5) == 5.0


def test_recency_weights_lean_the_median_toward_recent_runs():
    samples = [10.0] * 6 + [14.0] * 5  # a shift too small for the detector
    plain = predict_total_s(("k",), None, durations={"k": samples}, config=PLAIN)
    recent = predict_total_s(
        ("k",), None, durations={"k": samples}, config=JobsConfig(change_z=None)
    )
    assert plain.p50 == pytest.approx(10.0)
    assert recent.p50 == pytest.approx(14.0)


# ----- drift -------------------------------------------------------------------------
def _noisy(rng, level, n, sigma=0.2):
    return list(level * np.exp(rng.normal(0.0, sigma, n)))


def _errors_after_step(factor, config, seeds=20, runs=6):
    """|p50 / new level - 1| after 0..runs-1 runs at the new level, one row per seed."""
    out = np.zeros((seeds, runs))
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        samples, new = _noisy(rng, 20.0, 20), _noisy(rng, 20.0 * factor, runs)
        for run in range(runs):
            p50 = predict_total_s(("k",), None, durations={"k": samples}, config=config).p50
            out[seed, run] = abs(p50 / (20.0 * factor) - 1)
            samples = [*samples, new[run]][-config.sample_window_k :]
    return out


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_after_a_step_the_prediction_is_back_within_25pct_in_a_handful_of_runs(factor):
    errors = _errors_after_step(factor, CFG)
    assert np.median(errors[:, 3]) < 0.25  # typically, after 3 runs
    assert np.percentile(errors[:, 5], 80) < 0.25  # nearly always, after 5
    # the plain window waits for the window to turn over: the test tells them apart
    assert np.median(_errors_after_step(factor, PLAIN)[:, 5]) > 0.35


def test_the_change_point_is_found_where_the_level_moved():
    rng = np.random.default_rng(1)
    y = np.log(np.array(_noisy(rng, 10.0, 15, 0.1) + _noisy(rng, 30.0, 4, 0.1)))
    assert eta.change_point(y, 3.5) == 15


def test_steady_noise_is_not_a_change():
    rng = np.random.default_rng(2)
    flagged = sum(
        eta.change_point(np.log(np.array(_noisy(rng, 10.0, 20))), 3.5) is not None
        for _ in range(200)
    )
    assert flagged < 30


def test_after_a_change_the_spread_still_comes_from_the_whole_window():
    wobble = [0.8, 0.9, 1.0, 1.1, 1.2]
    samples = [10.0 * wobble[i % 5] for i in range(17)] + [36.0, 40.0, 44.0]
    pred = predict_total_s(("k",), None, durations={"k": samples}, config=CFG)
    assert pred.p50 == pytest.approx(40.0, rel=0.05)
    assert 1.1 < pred.p90 / pred.p50 < 1.25  # the +-20% wobble, re-levelled: a real p90
    blind = predict_total_s(
        ("k",), None, durations={"k": samples}, config=JobsConfig(change_z=None)
    )
    assert blind.p90 / blind.p50 > 2.5  # two levels mixed


# ----- projection --------------------------------------------------------------------
def _rec(p50=100.0, p90=140.0, confidence="learned", **extra):
    rec = {"eta_p50": p50, "eta_p90": p90, "eta_confidence": confidence, "started_at": 1000.0}
    rec.update(extra)
    return rec


def _running(rec, elapsed, config=CFG):
    return project_eta(rec, "running", elapsed_s=elapsed, config=config)


def test_prior_confidence_shows_no_pct_and_says_estimating():
    for status, elapsed in (("queued", None), ("running", 5.0)):
        view = project_eta(_rec(confidence="prior"), status, elapsed_s=elapsed, config=CFG)
        assert view.pct is None
        assert view.label_hint == ESTIMATING


def test_a_queued_learned_job_waits_with_its_p50():
    view = project_eta(_rec(), "queued", elapsed_s=None, config=CFG)
    assert (view.remaining_s, view.pct, view.label_hint) == (100.0, None, "queued")


def test_only_success_reads_100():
    assert project_eta(_rec(), "succeeded", elapsed_s=500.0, config=CFG).pct == 100.0
    failed = project_eta(_rec(pct_floor=42.0), "failed", elapsed_s=500.0, config=CFG)
    assert failed.pct == 42.0
    for elapsed in (99.0, 100.0, 1e4, 1e7):
        assert _running(_rec(), elapsed).pct <= CFG.pct_ceil


def test_the_persisted_floor_keeps_pct_from_going_back():
    # new progress says the job is much slower than the p50 suggested
    rec = _rec(pct_floor=60.0, fraction=0.2, progress_at=1050.0)
    view = _running(rec, 50.0)
    assert 100 * 50.0 / view.predicted_total_s < 60.0
    assert view.pct == 60.0


@settings(max_examples=200, deadline=None)
@given(
    p50=st.floats(0.5, 5000),
    ratio=st.floats(1.0, 4.0),
    steps=st.lists(st.floats(0.01, 2.0), min_size=2, max_size=30),
)
def test_pct_never_goes_backwards_nor_reaches_100(p50, ratio, steps):
    rec = _rec(p50=p50, p90=p50 * ratio)
    elapsed, last = 0.0, 0.0
    for step in steps:
        elapsed += step * p50
        view = _running(rec, elapsed)
        assert view.pct >= last
        assert view.pct <= CFG.pct_ceil
        assert view.remaining_s > 0
        rec["pct_floor"] = last = view.pct  # what the facade persists


def test_past_p50_the_total_moves_toward_p90_and_remaining_stays_honest():
    at_p50 = _running(_rec(), 100.0)
    assert 100.0 < at_p50.predicted_total_s < 140.0
    assert at_p50.remaining_s > 5.0
    assert at_p50.pct < 90
    assert at_p50.label_hint.startswith("about")
    later = _running(_rec(), 130.0)
    assert later.predicted_total_s > at_p50.predicted_total_s
    assert later.label_hint.startswith("about")


def test_past_p90_the_label_says_it_is_taking_longer():
    view = _running(_rec(), 150.0)
    assert view.label_hint == TAKING_LONGER
    assert view.remaining_s > 0
    assert view.pct < CFG.pct_ceil


def test_conditional_median_is_the_median_at_zero_and_q75_at_the_median():
    assert eta.conditional_median(math.log(50), 0.3, 0.0) == pytest.approx(50.0)
    q75 = 50 * math.exp(0.3 * 0.6744897501960817)
    assert eta.conditional_median(math.log(50), 0.3, 50.0) == pytest.approx(q75)
    deep = eta.conditional_median(math.log(50), 0.3, 50 * math.exp(0.3 * 20))
    assert deep > 50 * math.exp(0.3 * 20)


# ----- stage-aware refinement --------------------------------------------------------
def test_a_never_seen_key_reporting_stages_gets_its_remaining_from_the_rate():
    rec = _rec(p50=30.0, p90=45.0, confidence="prior", stage_index=2, stage_count=4)
    rec["progress_at"] = 1000.0 + 200.0
    view = _running(rec, 210.0)
    assert view.confidence == "observed"
    assert view.predicted_total_s == pytest.approx(420.0, rel=0.1)  # not the 30 s prior
    assert view.pct is not None and view.label_hint != ESTIMATING


def test_progress_pulls_a_learned_total_and_the_pull_grows_with_progress():
    early = _rec(fraction=0.1, progress_at=1000.0 + 20.0)  # rate says 200 s
    late = _rec(fraction=0.9, progress_at=1000.0 + 180.0)  # rate says 200 s
    t_early = _running(early, 20.0).predicted_total_s
    t_late = _running(late, 180.0).predicted_total_s
    assert 100.0 < t_early < 150.0
    assert t_late == pytest.approx(200.0, rel=0.05)


def test_the_rate_is_read_at_the_report_not_now():
    rec = _rec(p50=30.0, p90=45.0, confidence="prior", fraction=0.5, progress_at=1000.0 + 50.0)
    assert _running(rec, 60.0).predicted_total_s == pytest.approx(100.0, rel=0.05)


def test_an_unfinished_next_stage_bounds_the_rate_total():
    rec = _rec(confidence="prior", stage_index=1, stage_count=4, progress_at=1000.0 + 10.0)
    # stage 1 ended at 10 s (rate says 40 s) but stage 2 is still running at 60 s
    assert _running(rec, 60.0).predicted_total_s >= 120.0


def test_progress_from_an_earlier_attempt_is_ignored():
    rec = _rec(confidence="prior", fraction=0.9, progress_at=900.0)
    view = _running(rec, 10.0)
    assert view.confidence == "prior"


def test_a_learned_progress_curve_corrects_a_bar_that_runs_ahead():
    # this render's bar reads 0.5 when only a quarter of its time has passed
    curve = {"key": "m|o", "bins": {"5": [0.5, 0.02, 20]}}
    rec = _rec(confidence="prior", fraction=0.5, progress_at=1000.0 + 25.0, eta_progress=curve)
    assert _running(rec, 25.0).predicted_total_s == pytest.approx(100.0, rel=0.05)
    rec.pop("eta_progress")
    assert _running(rec, 25.0).predicted_total_s == pytest.approx(50.0, rel=0.05)


def test_progress_curve_reads_the_most_specific_key_with_enough_runs():
    plan = eta.eta_plan({"model": "m", "operation": "o", "duration_s": 6}, None, CFG)
    samples = {
        eta.progress_key("m|o|4-8s", 5): [0.4, 0.5],  # below n_min
        eta.progress_key("m|o", 5): [0.4, 0.5, 0.6],
        eta.progress_key("m|o", 9): [1.0, 1.0, 1.0],
    }
    curve = eta.progress_curve(plan, samples, CFG)
    assert curve["key"] == "m|o"
    assert set(curve["bins"]) == {"5", "9"}
    assert curve["bins"]["5"][0] == pytest.approx(0.5)
    assert eta.progress_curve(plan, {}, CFG) is None
    assert eta.progress_key("video", 5) not in eta.progress_keys(plan)


def test_a_prediction_with_nothing_learned_does_not_import_numpy():
    # numpy takes ~0.2 s to import: the first enqueue of a process paid it for
    # a plan with no learned runs, which numpy has nothing to compute for
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from nw.jobs.core import eta\n"
        "from nw.jobs.core.model import JobsConfig\n"
        "cfg = JobsConfig()\n"
        "plan = eta.eta_plan({'model': 'm', 'operation': 'o'}, None, cfg)\n"
        "few = {eta.progress_key('m|o', 5): [0.5], 'm|o': [3.0]}\n"
        "eta.prediction_fields(plan, few, cfg)\n"
        "eta.prediction_fields(eta.eta_plan({'i': 1}, None, cfg), {}, cfg)\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_exact_guess_that_missed_falls_back_to_the_prior():
    rec = _rec(p50=0.5, p90=0.5, confidence="exact", output_kind="video")
    assert _running(rec, 0.4).confidence == "exact"
    missed = _running(rec, 5.0)
    assert missed.confidence == "prior"
    assert missed.label_hint == ESTIMATING
    assert missed.predicted_total_s == pytest.approx(CFG.prior_total_s["video"], rel=0.05)


def test_config_rejects_nonsense_eta_knobs():
    for bad in (
        {"p90_min_samples": 1},
        {"recency_half_life": 0},
        {"change_z": -1},
        {"progress_noise": 0},
    ):
        with pytest.raises(ValueError):
            JobsConfig(**bad)


def test_predict_total_s_answers_the_documented_triple():
    p50, p90, confidence = predict_total_s(["m|o"], "video", durations={"m|o": [4, 5, 6]})
    assert (p50, confidence) == (pytest.approx(5.0, rel=0.1), "learned") and p90 >= p50
