"""Duration learning: what a finished job teaches, and the middleware around a real body."""

from __future__ import annotations

import pytest
from au import ComputationResult, ComputationStatus

from nw.jobs.api.facade import enqueue, estimate
from nw.jobs.core import eta
from nw.jobs.core.model import JobsConfig
from nw.jobs.core.records import new_record
from nw.jobs.execution.body import Launch, run_attempt
from nw.jobs.execution.learning import DurationLearningMiddleware, samples_to_learn
from nw.jobs.stores.sqlite import SqliteJobStore

SPECIFIC = ["flux|t2i|0-4s", "flux|t2i"]


def _meta(candidates, *, units=None, cached=False, output_kind="image", progress=None):
    return {
        "eta_candidates": candidates,
        "output_kind": output_kind,
        "units": units,
        "cached": cached,
        "progress": progress,
    }


# ----- samples_to_learn ---------------------------------------------------------------
def test_a_single_job_teaches_its_specific_keys_the_whole_time_and_not_the_coarse_key():
    learned = samples_to_learn(_meta([*SPECIFIC, "image"]), 12.0)
    assert learned == {"flux|t2i|0-4s": 12.0, "flux|t2i": 12.0}


def test_a_declared_multi_unit_job_teaches_whole_time_to_xN_keys_and_per_unit_to_coarse():
    keys = ["flux|t2i|x4", "image"]
    assert samples_to_learn(_meta(keys, units=4), 40.0) == {"flux|t2i|x4": 40.0, "image": 10.0}


def test_an_undeclared_multi_unit_job_never_touches_the_coarse_bucket():
    # four renders in one job, units forgotten: the coarse key must stay clean
    learned = samples_to_learn(_meta([*SPECIFIC, "image"], units=None), 48.0)
    assert "image" not in learned


def test_declared_units_one_teaches_the_coarse_key_per_unit():
    assert samples_to_learn(_meta(["flux|t2i", "image"], units=1), 9.0)["image"] == 9.0


def test_a_job_whose_only_key_is_coarse_learns_there():
    assert samples_to_learn(_meta(["image"]), 9.0) == {"image": 9.0}
    assert samples_to_learn(_meta(["image"], units=3), 9.0) == {"image": 3.0}


@pytest.mark.parametrize("elapsed", [float("nan"), float("inf"), -1.0])
def test_a_nonsense_time_is_not_learned(elapsed):
    assert samples_to_learn(_meta(SPECIFIC), elapsed) == {}


def test_a_cache_hit_is_never_learned_not_even_its_progress():
    meta = _meta([*SPECIFIC, "image"], units=2, cached=True, progress=[[0.5, 0.5]])
    assert samples_to_learn(meta, 0.3) == {}


def test_progress_reports_teach_each_specific_key_a_time_share_per_bin():
    progress = [[0.1, 0.25], [0.2, 0.28], [0.8, 0.5], [2.0, 0.9], [0.9, "x"]]
    learned = samples_to_learn(_meta([*SPECIFIC, "image"], progress=progress), 10.0)
    for key in SPECIFIC:
        assert learned[eta.progress_key(key, 2)] == pytest.approx(0.2 / 0.28)  # last in bin
        assert learned[eta.progress_key(key, 5)] == pytest.approx(0.8 / 0.5)
        assert eta.progress_key(key, 9) not in learned  # a share past the end is nonsense
    assert not any(k.startswith("image@") for k in learned)


# ----- the middleware ----------------------------------------------------------------
class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _done(meta, status=ComputationStatus.COMPLETED):
    return ComputationResult({}, status, metadata=meta)


def test_the_middleware_times_itself_and_its_started_map_is_the_liveness_signal():
    clock, recorded = Clock(), []
    mw = DurationLearningMiddleware(record=recorded.append, clock=clock)
    mw.before_compute(None, (), {}, "job1")
    assert mw.is_running("job1") and not mw.is_running("job2")
    clock.t += 7.5
    mw.after_compute("job1", _done(_meta(SPECIFIC)))
    assert recorded == [{"flux|t2i|0-4s": 7.5, "flux|t2i": 7.5}]
    assert not mw.is_running("job1")


def test_failures_and_errors_teach_nothing_and_release_the_job():
    clock, recorded = Clock(), []
    mw = DurationLearningMiddleware(record=recorded.append, clock=clock)
    mw.before_compute(None, (), {}, "a")
    mw.before_compute(None, (), {}, "b")
    clock.t += 3
    mw.after_compute("a", _done(_meta(SPECIFIC), ComputationStatus.FAILED))
    mw.on_error("b", RuntimeError("boom"))
    assert recorded == []
    assert not mw.is_running("a") and not mw.is_running("b")


def test_a_cached_result_is_timed_but_not_recorded():
    clock, recorded = Clock(), []
    mw = DurationLearningMiddleware(record=recorded.append, clock=clock)
    mw.before_compute(None, (), {}, "a")
    clock.t += 0.2
    mw.after_compute("a", _done(_meta(SPECIFIC, cached=True)))
    assert recorded == [] and not mw.is_running("a")


# ----- through a real body and store -------------------------------------------------
def test_a_real_run_teaches_durations_and_progress_and_keeps_the_newest_window(tmp_path):
    wall = Clock()
    config = JobsConfig(sample_window_k=3, clock=wall)
    store = SqliteJobStore(tmp_path / "jobs.sqlite")
    mono = Clock()
    mw = DurationLearningMiddleware(
        record=lambda s: store.add_samples(s, now=wall(), window=config.sample_window_k),
        config=config,
        clock=mono,
    )
    params = {"model": "flux", "operation": "t2i", "units": 2}
    plan = eta.eta_plan(params, 2, config)

    def body(project, params, *, on_event):
        wall.t += 2.0
        on_event({"fraction": 0.25})
        on_event({"fraction": 0.25})  # a repeat is not new progress
        wall.t += 6.0
        on_event({"stage_index": 3, "stage_count": 4, "fraction": 0.75})
        wall.t += 2.0
        return {"ok": True}

    for i, seconds in enumerate([10.0, 20.0, 30.0, 40.0]):
        job_id = f"job{i}"
        pred = eta.prediction_fields(plan, {}, config)
        record = new_record(
            job_id=job_id, kind="k", label="k", idempotency_key=job_id, params=params,
            now=wall(), plan=plan, prediction=pred, estimated_usd=None, runner="inproc",
            max_attempts=1,
        )  # fmt: skip
        store.create(record, claimable=False)
        row = store.start(job_id, now=wall(), runner_id="test")
        mw.before_compute(body, (), {}, job_id)
        result = run_attempt(store, row, Launch(fn=body, project=None), config)
        mono.t += seconds
        mw.after_compute(job_id, result)
        wall.t += 1.0
    keys = [*plan.candidates, *eta.progress_keys(plan)]
    learned = {k: v for k, v in store.samples(keys, window=10).items() if v}
    assert learned["flux|t2i|x2"] == [20.0, 30.0, 40.0]  # newest 3, oldest first
    assert learned["image"] == [10.0, 15.0, 20.0]  # per unit
    # reported 0.25 after 2 of 10 s (rho 0.8) and 0.75 after 8 of 10 s
    assert learned[eta.progress_key("flux|t2i|x2", 2)] == pytest.approx([0.8] * 3)
    assert learned[eta.progress_key("flux|t2i|x2", 7)] == pytest.approx([8 / 10 / 0.75] * 3)
    assert set(learned) == {
        "flux|t2i|x2",
        "image",
        eta.progress_key("flux|t2i|x2", 2),
        eta.progress_key("flux|t2i|x2", 7),
    }
    row = store.get("job3")
    assert row.record["progress_at"] == pytest.approx(row.record["started_at"] + 8.0)
    store.close()


def test_malformed_units_are_refused_by_enqueue_and_estimate_alike(project):
    for bad in (0, -2, 2.5, "4", True):
        with pytest.raises(ValueError, match="units"):
            enqueue(project, "render", {"units": bad}, dispatch={"render": lambda p, q: None})
        with pytest.raises(ValueError, match="units"):
            estimate(project, "render", {"units": bad})
