"""A job's life in one process: enqueue, run, events, result, failure kinds."""

from __future__ import annotations

import json
import threading

import pytest

from nw import jobs
from nw.jobs import JobCancelled, JobRefused
from tests.helpers import wait_until


def finished(project, job_id, cfg):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.is_terminal and j,
        what=f"job {job_id[:8]} to finish",
    )


def test_enqueue_returns_at_once_and_the_body_runs_on_another_thread(project, cfg, gate):
    caller = threading.get_ident()
    seen = {}

    def body(project, params, *, should_cancel, on_event):
        seen["thread"] = threading.get_ident()
        return gate(project, params, should_cancel=should_cancel, on_event=on_event)

    job = jobs.enqueue(project, "render", {"n": 1}, dispatch={"render": body}, config=cfg)
    assert job.status in (jobs.QUEUED, jobs.RUNNING)
    assert gate.started.wait(5)
    assert seen["thread"] != caller
    gate.release.set()
    assert finished(project, job.job_id, cfg).status == jobs.SUCCEEDED


def test_started_at_is_stamped_before_the_first_line_of_the_body(project, cfg):
    seen = {}

    def body(project, params, *, job_id):
        seen["job"] = jobs.get_job(project, job_id, config=cfg)
        return {"ok": 1}

    job = jobs.enqueue(project, "render", {}, dispatch={"render": body}, config=cfg)
    finished(project, job.job_id, cfg)
    assert seen["job"].status == jobs.RUNNING
    assert seen["job"].started_at is not None
    assert seen["job"].attempt == 1


def test_the_body_gets_only_the_keywords_it_declares(project, cfg):
    got = {}

    def plain(project, params):
        got["plain"] = params
        return {"ok": 1}

    def picky(project, params, *, job_id, secrets):
        got["picky"] = (job_id, secrets)
        return {"ok": 1}

    def greedy(project, params, **kwargs):
        got["greedy"] = sorted(kwargs)
        return {"ok": 1}

    dispatch = {"plain": plain, "picky": picky, "greedy": greedy}
    done = [
        jobs.enqueue(
            project, k, {"k": k}, dispatch=dispatch, secrets={"fal": "sekrit-1"}, config=cfg
        )
        for k in dispatch
    ]
    for job in done:
        assert finished(project, job.job_id, cfg).status == jobs.SUCCEEDED
    assert got["plain"] == {"k": "plain"}
    assert got["picky"] == (done[1].job_id, {"fal": "sekrit-1"})
    assert got["greedy"] == ["job_id", "on_event", "resume", "secrets", "should_cancel"]


def test_events_are_stamped_forwarded_and_mirrored(project, cfg):
    forwarded = []

    mid_run = []

    def body(project, params, *, on_event, job_id):
        on_event({"index": 1, "stage_count": 4, "transform": "upscale"})
        on_event({"stage_index": 2, "index": 9, "current_transform": "color", "transform": "x"})
        mid_run.append(jobs.get_job(project, job_id, config=cfg).progress)
        on_event({"kind": "cache_hit", "cache_hit_savings_usd": 0.25})
        on_event({"actual_usd": 0.5, "has_unknown_costs": True, "clip_artifact_id": "art-7"})
        on_event("a plain string event")
        return {"cost_usd_actual": 0.75}

    job = jobs.enqueue(
        project, "render", {}, dispatch={"render": body}, on_event=forwarded.append, config=cfg
    )
    done = finished(project, job.job_id, cfg)
    # a success reads every declared stage done; the transform is the explicit key's
    assert done.progress == jobs.JobProgress(
        stage_index=4, stage_count=4, current_transform="color", fraction=None
    )
    # while it ran, the explicit keys won over their aliases (2 of 4, not 9; not "x")
    assert mid_run == [
        jobs.JobProgress(stage_index=2, stage_count=4, current_transform="color", fraction=None)
    ]
    assert done.cached is True
    assert done.artifact_ref == "art-7"
    assert done.cost.actual_usd == 0.75  # the terminal result reconciles the total
    assert done.cost.cache_hit_savings_usd == 0.25
    assert done.cost.actual_is_lower_bound is True  # sticky: reported unknown mid-run
    dicts = [e for e in forwarded if isinstance(e, dict)]
    assert all(e["job_id"] == job.job_id and e["run_id"] == done.run_id for e in dicts)
    assert done.last_event_id == dicts[-1]["event_id"]
    assert forwarded[-1] == "a plain string event"


def test_a_result_reconciles_cost_and_artifact(project, cfg):
    def body(project, params):
        return {"cost_usd_actual": 1.5, "has_unknown_costs": False, "video_artifact_id": "v1"}

    done = finished(
        project, jobs.enqueue(project, "r", {}, dispatch={"r": body}, config=cfg).job_id, cfg
    )
    assert (done.cost.actual_usd, done.cost.actual_is_lower_bound) == (1.5, False)
    assert done.artifact_ref == "v1"
    assert done.pct == 100.0 and done.grade == "ok"


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (JobRefused("no song uploaded", detail={"missing": "song"}), jobs.FAILED, "refused"),
        (JobCancelled("stopped"), jobs.CANCELLED, "cancelled"),
        (ValueError("bug in body"), jobs.FAILED, "crashed"),
        (KeyboardInterrupt(), jobs.FAILED, "crashed"),
        (Custom("odd"), jobs.FAILED, "crashed"),
    ],
)
def test_how_a_body_ends_decides_status_and_error_kind(project, cfg, error, status, kind):
    def body(project, params):
        raise error

    done = finished(
        project, jobs.enqueue(project, "r", {}, dispatch={"r": body}, config=cfg).job_id, cfg
    )
    assert (done.status, done.error_kind) == (status, kind)
    assert done.error
    assert jobs.error_kind_of(error) == kind
    if kind == "refused":
        assert done.error == "no song uploaded"
        assert done.error_detail == {"missing": "song"}
        assert done.grade == "warning"
    if kind == "crashed":
        assert done.grade == "error"


def test_a_result_that_is_not_json_fails_the_job_with_a_reason(project, cfg):
    done = finished(
        project,
        jobs.enqueue(
            project, "r", {}, dispatch={"r": lambda p, q: {"x": object()}}, config=cfg
        ).job_id,
        cfg,
    )
    assert done.status == jobs.FAILED
    assert "not JSON-serializable" in done.error


def test_capture_context_is_entered_around_the_body_on_its_thread(project, cfg):
    seen = []
    local = threading.local()

    class Ctx:
        def __enter__(self):
            local.user = "alice"

        def __exit__(self, *exc):
            seen.append("exit")

    def body(project, params):
        seen.append(getattr(local, "user", None))
        return {"ok": 1}

    job = jobs.enqueue(project, "r", {}, dispatch={"r": body}, capture_context=Ctx, config=cfg)
    finished(project, job.job_id, cfg)
    assert seen == ["alice", "exit"]


def test_to_dict_is_the_json_contract_with_every_field(project, cfg):
    job = finished(
        project,
        jobs.enqueue(
            project, "r", {"a": [1, 2]}, dispatch={"r": lambda p, q: {"ok": 1}}, config=cfg
        ).job_id,
        cfg,
    )
    data = jobs.to_dict(job)
    assert set(data) == set(jobs.Job.__dataclass_fields__)
    assert data["status"] == "succeeded"
    assert isinstance(data["progress"], dict) and isinstance(data["cost"], dict)
    assert json.loads(json.dumps(data))["params"] == {"a": [1, 2]}


def test_at_most_max_concurrent_bodies_run_and_the_rest_wait_queued(project):
    cfg = jobs.JobsConfig(max_concurrent=2)
    running, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def body(project, params):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
        return {"ok": 1}

    started = [
        jobs.enqueue(project, "r", {"i": i}, dispatch={"r": body}, config=cfg) for i in range(6)
    ]
    wait_until(lambda: running[0] == 2, what="two bodies running")
    waiting = [jobs.get_job(project, j.job_id, config=cfg).status for j in started]
    assert waiting.count(jobs.RUNNING) == 2 and waiting.count(jobs.QUEUED) == 4
    release.set()
    for job in started:
        assert finished(project, job.job_id, cfg).status == jobs.SUCCEEDED
    assert peak[0] == 2


def test_the_eta_is_predicted_again_when_a_queued_job_starts(project, gate):
    import time

    from nw.jobs.stores import shared_store

    skew = [0.0]  # the queue wait is made long by moving the clock, not by sleeping
    one = jobs.JobsConfig(max_concurrent=1, clock=lambda: time.time() + skew[0])
    params = {"model": "flux", "operation": "t2i"}
    blocker = jobs.enqueue(project, "b", {}, dispatch={"b": gate}, config=one)
    assert gate.started.wait(5)
    second_gate = type(gate)()
    waiting = jobs.enqueue(project, "r", params, dispatch={"r": second_gate}, config=one)
    assert waiting.confidence == "prior"
    shared_store(project, one, create=False).add_samples({"flux|t2i": 7.0}, now=1.0, window=20)
    for t in (2.0, 3.0):
        shared_store(project, one, create=False).add_samples({"flux|t2i": 7.0}, now=t, window=20)
    skew[0] = 5.0
    gate.release.set()
    assert second_gate.started.wait(5)
    running = jobs.get_job(project, waiting.job_id, config=one)  # as soon as it starts
    assert (running.confidence, running.predicted_total_s, running.eta_key) == (
        "learned",
        7.0,
        "flux|t2i",
    )
    second_gate.release.set()
    wait_until(lambda: jobs.get_job(project, blocker.job_id, config=one).is_terminal)


def test_a_capture_hook_that_fails_leaves_no_job_behind(project, cfg):
    def broken_hook():
        raise RuntimeError("no request context")

    with pytest.raises(RuntimeError, match="no request context"):
        jobs.enqueue(
            project,
            "r",
            {},
            dispatch={"r": lambda p, q: {"ok": 1}},
            capture_context=broken_hook,
            config=cfg,
        )
    assert jobs.list_jobs(project, config=cfg) == []
