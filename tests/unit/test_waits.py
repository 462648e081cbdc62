"""The pure half of scarce providers: limit keys, admission, and a queued job's wait."""

from __future__ import annotations

import pytest

from nw.errors import InvalidInput
from nw.jobs.core import limits, waits
from nw.jobs.core.limits import Limit


def test_a_limit_key_is_a_string_a_template_or_a_callable():
    assert limits.key_for("fal:kling", "k", {}) == "fal:kling"
    assert limits.key_for("fal:{model}", "k", {"model": "flux"}) == "fal:flux"
    assert limits.key_for(lambda p: f"voice:{p['v']}", "k", {"v": 1}) == "voice:1"
    assert limits.key_for(lambda p: None, "k", {}) is None
    assert limits.key_for(None, "k", {"model": "x"}) is None
    with pytest.raises(InvalidInput, match="cannot be filled"):
        limits.key_for("fal:{model}", "k", {})
    with pytest.raises(InvalidInput, match="must be a string"):
        limits.key_for(lambda p: 3, "k", {})
    with pytest.raises(InvalidInput, match="malformed"):
        limits.check_spec("fal:{model")


def test_admit_takes_each_key_up_to_its_room_in_claim_order():
    cands = [("j1", "a"), ("j2", "a"), ("j3", "b"), ("j4", "a"), ("j5", "free"), ("j6", "c")]
    admitted, full = limits.admit(cands, {"a": 1, "b": None, "c": 0})
    assert admitted == ["j1", "j3", "j5"]  # a: one slot; b: no cap; free: no limit; c: paused
    assert full == ["a", "c"]
    assert limits.room(3, 1) == 1 and limits.room(None, None) is None and limits.room(-2, 5) == 0


def test_what_a_waiting_job_says():
    assert limits.waiting_text(Limit("fal:kling", 2, None, 2)) == "waiting: fal:kling at 2 of 2"
    assert limits.waiting_text(Limit("voice", None, 10, 0, 10)) == "waiting: voice at 10/s"
    assert limits.delay_text(40.2) == "starts in 40s"
    assert limits.delay_text(600) == "starts in 10m"


def _q(job_id, key=None, p50=10.0, due=0.0, confidence="learned"):
    return {
        "job_id": job_id,
        "limit_key": key,
        "queue_at": due,
        "eta_p50": p50,
        "eta_confidence": confidence,
    }


def test_a_queued_job_starts_when_a_slot_frees():
    running = [waits.Running(None, 5.0), waits.Running(None, 8.0)]
    got = waits.plan_starts([_q("a"), _q("b"), _q("c")], running, slots=2, limits={}, now=100)
    assert got["a"].start_in_s == 5.0 and got["b"].start_in_s == 8.0
    assert got["c"].start_in_s == 15.0  # after a, which started at 5 and runs 10


def test_a_limited_key_waits_without_holding_up_others():
    lim = {"k": Limit("k", 1, None, 1)}
    running = [waits.Running("k", 30.0)]
    queue = [_q("k1", "k"), _q("free1"), _q("k2", "k")]
    got = waits.plan_starts(queue, running, slots=3, limits=lim, now=0)
    assert got["k1"].start_in_s == 30.0 and got["k1"].reason == "waiting: k at 1 of 1"
    assert got["free1"].start_in_s == 0.0  # not behind k1
    assert got["k2"].start_in_s == 40.0


def test_a_delay_and_a_rate_push_the_start():
    lim = {"r": Limit("r", None, 2, 0, 0)}
    queue = [_q("d", due=50.0), *(_q(f"r{i}", "r", p50=1.0) for i in range(3))]
    got = waits.plan_starts(queue, [], slots=5, limits=lim, now=0)
    assert got["d"].start_in_s == 50.0 and got["d"].reason == "starts in 50s"
    assert [got[f"r{i}"].start_in_s for i in range(3)] == [0.0, 0.0, 1.0]


def test_the_start_is_unknown_without_workers_or_behind_a_prior():
    assert waits.plan_starts([_q("a")], [], slots=0, limits={}, now=0)["a"].start_in_s is None
    queue = [_q("guess", confidence="prior"), _q("after")]
    got = waits.plan_starts(queue, [], slots=1, limits={}, now=0)
    assert got["guess"].start_in_s == 0.0  # nothing ahead of it
    assert got["after"].start_in_s is None  # behind a job whose run time is a guess
    paused = waits.plan_starts(
        [_q("p", "k")], [], slots=1, limits={"k": Limit("k", 0, None)}, now=0
    )
    assert paused["p"].start_in_s is None


def test_worker_slots_count_live_workers_only():
    runners = [
        {"role": "worker", "slots": 4, "beat_at": 100.0},
        {"role": "worker", "slots": 4, "beat_at": 10.0},  # stale
        {"role": "inproc", "beat_at": 100.0},
    ]
    assert waits.worker_slots(runners, now=101.0, stale_s=30.0) == 4


def _queued_row(confidence="learned"):
    from nw.jobs.core import eta
    from nw.jobs.core.model import JobsConfig
    from nw.jobs.core.records import JobRow, new_record

    config = JobsConfig()
    plan = eta.EtaPlan(("k|video",), "video", None, False)
    prediction = {"eta_p50": 20.0, "eta_p90": 30.0, "eta_confidence": confidence}
    record = new_record(
        job_id="d" * 64,
        kind="k",
        label="x",
        idempotency_key="i",
        params={},
        now=1000.0,
        plan=plan,
        prediction=prediction,
        estimated_usd=None,
        runner="worker",
        max_attempts=1,
    )
    return JobRow(record, "pending"), config


def test_a_queued_jobs_eta_counts_its_wait():
    from nw.jobs.core.records import to_job

    row, config = _queued_row()
    alone = to_job(row, 1000.0, config)
    assert alone.eta_s == 20.0 and alone.starts_at is None  # no wait known: run time only
    waiting = to_job(row, 1000.0, config, wait=waits.Wait(30.0, "waiting: k at 2 of 2"))
    assert waiting.eta_s == 50.0 and waiting.starts_at.timestamp() == 1030.0
    assert waiting.waiting == "waiting: k at 2 of 2" == waiting.label_hint
    unknown = to_job(row, 1000.0, config, wait=waits.Wait(None, None))
    assert unknown.eta_s is None and unknown.label_hint == "estimating…"
