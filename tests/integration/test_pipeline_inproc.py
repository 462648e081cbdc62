"""Pipelines of the in-process tier (``dispatch=``), on both stores: a waiting
step holds no pool thread, its process starts it when the store releases it
(no worker claims it, even one serving its kind), inputs reach it, a failure
or a cancel lets it go, and its process's death ends it instead of leaving it
waiting forever."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

import pytest

from nw import jobs
from nw.errors import InvalidValue
from nw.jobs.execution.runtimes import existing_runtime
from nw.jobs.stores import store_location
from tests.fixtures import pipeline_bodies
from tests.helpers import pipeline_ended, python_process, wait_until
from tests.integration.workers import start_worker, stop

IMPORT = ("--import", "tests.fixtures.pipeline_bodies")
HERE = os.getpid()


@pytest.fixture(autouse=True)
def _kinds():
    pipeline_bodies.register_all()
    yield
    for gate in GATES.values():  # a test that failed early leaves no body held
        gate.set()
    GATES.clear()


def _here(project, params):
    """A step body of this process: says which process ran it."""
    return {"name": params["name"], "n": params.get("n", 1), "pid": os.getpid()}


def _join(project, params, *, inputs):
    got = sum(v.get("n", 0) for v in inputs.values())
    return {"sum": got, "from": sorted(inputs), "pid": os.getpid(), "n": params.get("i", 0)}


def _fail(project, params):
    raise RuntimeError(f"step {params['name']} broke")


GATES: dict[str, threading.Event] = {}


def _gated(project, params):
    """Held running until the test opens its gate."""
    if not GATES[params["gate"]].wait(30):
        raise TimeoutError("the gate was never opened")
    return {"name": params["name"], "n": 1}


HERE_BODIES = {"p.step": _here, "p.join": _join, "p.fail": _fail, "p.gate": _gated}


def idle(project, cfg) -> bool:
    rts = existing_runtime(store_location(project, cfg))
    return rts is not None and rts.wait_idle(0)


def test_steps_run_here_even_beside_a_worker_of_their_kinds(project, cfg):
    # A worker serving p.step and p.join runs beside this process, whose one
    # pool thread a gate holds: the panels (p.join, here) are released by the
    # worker's board (p.step) while this process cannot start them. A job the
    # worker claims after their release, later in the claim order, proves the
    # worker had its turn at them: released steps have no due time, so it
    # takes none (were they claimable, it would take them first).
    cfg = dataclasses.replace(cfg, max_concurrent=1)
    GATES["w"] = threading.Event()
    proc = start_worker(project, max_concurrent=4, database_url=cfg.database_url, extra=IMPORT)
    try:
        hold = jobs.enqueue(
            project, "p.gate", {"name": "hold", "gate": "w"}, dispatch=HERE_BODIES, config=cfg
        )
        wait_until(
            lambda: jobs.get_job(project, hold.job_id, config=cfg).status.value == "running",
            what="the gate to hold this process's only thread",
        )
        steps = {"board": {"kind": "p.step", "params": {"name": "board", "n": 0}}}
        for i in range(4):
            steps[f"panel{i}"] = {"kind": "p.join", "params": {"i": i}, "after": ["board"]}
        steps["cut"] = {"kind": "p.join", "params": {}, "after": [f"panel{i}" for i in range(4)]}
        here = {"p.join": _join}
        p = jobs.enqueue_pipeline(project, steps, dispatch=here, config=cfg)
        wait_until(
            lambda: all(
                s.job.waiting is None
                for s in jobs.get_pipeline(project, p.pipeline_id, config=cfg).steps
                if s.name.startswith("panel")
            ),
            timeout=30,
            what="the worker's board to release the panels",
        )
        later = jobs.enqueue(project, "p.step", {"name": "later"}, config=cfg)
        assert jobs.wait(project, later.job_id, timeout=30, config=cfg).status.value == "succeeded"
        now = jobs.get_pipeline(project, p.pipeline_id, config=cfg)
        assert [now.step(f"panel{i}").job.status.value for i in range(4)] == ["queued"] * 4
        GATES["w"].set()
        done = pipeline_ended(project, cfg, p.pipeline_id)
    finally:
        GATES["w"].set()
        stop(proc)
    assert done.status == "succeeded"
    assert {done.step(n).job.result["pid"] for n in steps if n != "board"} == {HERE}
    assert done.step("board").job.result["name"] == "board"  # the worker's body
    cut = done.step("cut").job.result
    assert cut["from"] == [f"panel{i}" for i in range(4)] and cut["sum"] == 6
    assert wait_until(lambda: idle(project, cfg), what="the runtime to let go")


def test_a_waiting_step_holds_no_pool_thread(project, cfg, tmp_path):
    # Two threads: one held by a running upstream, one waiting step after it.
    # A third job must still get a thread while the step waits.
    cfg = dataclasses.replace(cfg, max_concurrent=2)
    GATES["a"] = threading.Event()
    try:
        up = jobs.enqueue(
            project, "p.gate", {"name": "up", "gate": "a"}, dispatch=HERE_BODIES, config=cfg
        )
        down = jobs.enqueue(
            project, "p.step", {"name": "down"}, after=[up.job_id], dispatch=HERE_BODIES, config=cfg
        )
        other = jobs.enqueue(project, "p.step", {"name": "other"}, dispatch=HERE_BODIES, config=cfg)
        got = jobs.wait(project, other.job_id, timeout=20, config=cfg)
        assert got.status.value == "succeeded"
        waiting = jobs.get_job(project, down.job_id, config=cfg)
        assert waiting.status.value == "queued" and waiting.result is None
    finally:
        GATES["a"].set()
    done = jobs.wait(project, down.job_id, timeout=20, config=cfg)
    assert done.status.value == "succeeded" and done.result["pid"] == HERE


def _steps_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nw-steps" and t.is_alive()]


def test_the_thread_reading_waiting_steps_ends_when_none_is_left(project, cfg):
    steps = {"a": {"kind": "p.step", "params": {"name": "a"}},
             "b": {"kind": "p.step", "params": {"name": "b"}, "after": ["a"]}}  # fmt: skip
    p = jobs.enqueue_pipeline(project, steps, dispatch=HERE_BODIES, config=cfg)
    assert pipeline_ended(project, cfg, p.pipeline_id).status == "succeeded"
    # b waited on a thread of its own; with nothing left to wait for, it ends
    assert wait_until(lambda: not _steps_threads(), what="the steps' thread to end")


def test_a_failed_step_stops_the_waiting_ones_and_they_are_let_go(project, cfg):
    steps = {
        "a": {"kind": "p.fail", "params": {"name": "a"}},
        "b": {"kind": "p.step", "params": {"name": "b"}, "after": ["a"]},
        "c": {"kind": "p.step", "params": {"name": "c"}, "after": ["b"]},
    }
    p = jobs.enqueue_pipeline(project, steps, dispatch=HERE_BODIES, config=cfg)
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.status == "failed"
    assert done.step("b").job.status.value == "cancelled"
    assert "upstream step 'a' failed" in (done.step("b").job.error or "")
    assert done.step("c").job.status.value == "cancelled"
    assert wait_until(lambda: idle(project, cfg), what="the runtime to let go of b and c")


def test_cancel_pipeline_lets_the_waiting_steps_go(project, cfg):
    GATES["c"] = threading.Event()
    try:
        steps = {
            "a": {"kind": "p.gate", "params": {"name": "a", "gate": "c"}},
            "b": {"kind": "p.step", "params": {"name": "b"}, "after": ["a"]},
        }
        p = jobs.enqueue_pipeline(project, steps, dispatch=HERE_BODIES, config=cfg)
        wait_until(
            lambda: (
                jobs.get_job(project, p.step("a").job.job_id, config=cfg).status.value == "running"
            ),
            what="a to run",
        )
        jobs.cancel_pipeline(project, p.pipeline_id, config=cfg)
    finally:
        GATES["c"].set()
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.step("b").job.status.value == "cancelled"
    assert wait_until(lambda: idle(project, cfg), what="the runtime to let go")


def test_cancel_pipeline_lets_a_delayed_step_go_at_once(project, cfg):
    # a root step due in an hour is held by this process's timer: the cancel
    # lets it go now, as cancel_job does, not when the hour is up
    later = cfg.clock() + 3600
    steps = {
        "a": {"kind": "p.step", "params": {"name": "a"}, "not_before": later},
        "b": {"kind": "p.step", "params": {"name": "b"}, "after": ["a"]},
    }
    p = jobs.enqueue_pipeline(project, steps, dispatch=HERE_BODIES, config=cfg)
    assert not idle(project, cfg)
    got = jobs.cancel_pipeline(project, p.pipeline_id, config=cfg)
    assert {s.job.status.value for s in got.steps} == {"cancelled"}
    assert wait_until(lambda: idle(project, cfg), what="the runtime to let go of a")


_DIES_AFTER_ENQUEUE = (
    "import json, sys, time; from nw import jobs, Project; from nw.jobs import JobsConfig\n"
    "cfg = JobsConfig(database_url=sys.argv[4] or None, heartbeat_interval_s=0.2)\n"
    "j = jobs.enqueue(Project(sys.argv[1]), 'x.step', json.loads(sys.argv[3]),"
    " after=[sys.argv[2]], dispatch={'x.step': lambda project, params: {}}, config=cfg)\n"
    "print(j.job_id, flush=True)\n"
    "time.sleep(60)\n"
)


def _enqueued_by_a_process_that_dies(project, cfg, upstream: str, params: dict) -> str:
    """The id of an in-process ``x.step`` job (``params``) after ``upstream``
    that another process enqueued, and was killed with it still waiting."""
    args = (str(project.root), upstream, json.dumps(params), cfg.database_url or "")
    with python_process(_DIES_AFTER_ENQUEUE, args=args) as proc:
        return proc.stdout.readline().strip()


def test_a_step_waiting_in_a_dead_process_is_ended_not_left_waiting(project, cfg):
    # Another process enqueues a step after an upstream that runs here, and
    # dies: its waiting step is ended (orphaned) by the readers while the
    # upstream still runs, not left queued for a process that is gone.
    GATES["o"] = threading.Event()
    try:
        up = jobs.enqueue(
            project, "p.gate", {"name": "up", "gate": "o"}, dispatch=HERE_BODIES, config=cfg
        )
        theirs = _enqueued_by_a_process_that_dies(project, cfg, up.job_id, {"n": 2})
        ended = wait_until(
            lambda: (j := jobs.get_job(project, theirs, config=cfg)).is_terminal and j,
            timeout=60,
            what="the dead process's step to be ended",
        )
        assert ended.status == jobs.FAILED and ended.error.startswith(jobs.REAPED_REASON)
        assert jobs.get_job(project, up.job_id, config=cfg).status == jobs.RUNNING
    finally:
        GATES["o"].set()


def test_a_pipeline_whose_process_dies_mid_run_ends(project, cfg):
    # The process that holds the in-process steps is killed while its first
    # step runs: readers end that step and the one after it, the pipeline
    # does not stay "running" forever.
    code = (
        "import os, sys, time; from nw import jobs, Project; from nw.jobs import JobsConfig\n"
        "def hold(project, params):\n"
        "    time.sleep(60)\n"
        "def step(project, params):\n"
        "    return {}\n"
        "cfg = JobsConfig(database_url=sys.argv[2] or None, heartbeat_interval_s=0.2)\n"
        "p = jobs.enqueue_pipeline(Project(sys.argv[1]), {'a': {'kind': 'x.hold'},"
        " 'b': {'kind': 'x.step', 'after': ['a']}},"
        " dispatch={'x.hold': hold, 'x.step': step}, config=cfg)\n"
        "print(p.pipeline_id, flush=True)\n"
        "time.sleep(60)\n"
    )
    with python_process(code, args=(str(project.root), cfg.database_url or "")) as proc:
        pipeline_id = proc.stdout.readline().strip()
        assert pipeline_id.startswith("pl-")
        wait_until(
            lambda: jobs.get_pipeline(project, pipeline_id, config=cfg).status == "running",
            what="a to run",
        )
    done = pipeline_ended(project, cfg, pipeline_id, timeout=60)
    assert done.status in ("failed", "cancelled")
    assert all(s.job.is_terminal for s in done.steps)


def test_a_cancel_as_a_delayed_step_is_released_lets_it_go_at_once(project, cfg, monkeypatch):
    # The cancel lands between the waiter's read (released) and the step's
    # delay timer: the step must not be held until its not_before (an hour).
    from nw.jobs.api.handles import writer

    GATES["r"] = threading.Event()
    up = jobs.enqueue(
        project, "p.gate", {"name": "up", "gate": "r"}, dispatch=HERE_BODIES, config=cfg
    )
    down = jobs.enqueue(
        project,
        "p.step",
        {"name": "down"},
        after=[up.job_id],
        not_before=time.time() + 3600,
        dispatch=HERE_BODIES,
        config=cfg,
    )
    rt = writer(project, cfg)
    schedule = rt._schedule

    def cancel_first(job_id, launch, priority, not_before):
        jobs.cancel_job(project, job_id, config=cfg)
        schedule(job_id, launch, priority, not_before)

    monkeypatch.setattr(rt, "_schedule", cancel_first)
    GATES["r"].set()
    assert jobs.wait(project, down.job_id, timeout=20, config=cfg).status.value == "cancelled"
    assert wait_until(lambda: idle(project, cfg), what="the runtime to let the step go")


def _flaky(project, params):
    """Fails until its gate is open."""
    if not GATES[params["gate"]].is_set():
        raise RuntimeError(f"step {params['name']} broke")
    return {"name": params["name"], "n": 1, "pid": os.getpid()}


def test_retry_pipeline_runs_the_failed_steps_here_again_with_dispatch(project, cfg):
    GATES["f"] = threading.Event()
    here = {**HERE_BODIES, "p.flaky": _flaky}
    steps = {
        "a": {"kind": "p.step", "params": {"name": "a"}},
        "b": {"kind": "p.flaky", "params": {"name": "b", "gate": "f"}, "after": ["a"]},
        "c": {"kind": "p.join", "params": {}, "after": ["b"]},
    }
    p = jobs.enqueue_pipeline(project, steps, dispatch=here, config=cfg)
    failed = pipeline_ended(project, cfg, p.pipeline_id)
    assert failed.status == "failed" and failed.step("c").job.status.value == "cancelled"
    first_a = failed.step("a").job
    # without the bodies, a step that ran here (its kind not for workers) is refused
    with pytest.raises(InvalidValue) as refused:
        jobs.retry_pipeline(project, p.pipeline_id, config=cfg)
    assert "not registered for workers" in str(refused.value) and "\n" not in str(refused.value)
    GATES["f"].set()
    jobs.retry_pipeline(project, p.pipeline_id, dispatch=here, config=cfg)
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.status == "succeeded"
    assert done.step("a").job.finished_at == first_a.finished_at  # not run again
    assert done.step("b").job.result["pid"] == HERE and done.step("c").job.result["pid"] == HERE
    assert done.step("c").job.result["from"] == ["b"]
    assert wait_until(lambda: idle(project, cfg), what="the runtime to let go")


def test_a_released_step_the_runtime_cannot_take_is_ended_not_left_queued(
    project, cfg, monkeypatch
):
    from nw.jobs.api.handles import writer

    GATES["u"] = threading.Event()
    up = jobs.enqueue(
        project, "p.gate", {"name": "up", "gate": "u"}, dispatch=HERE_BODIES, config=cfg
    )
    down = jobs.enqueue(
        project, "p.step", {"name": "down"}, after=[up.job_id], dispatch=HERE_BODIES, config=cfg
    )
    rt = writer(project, cfg)

    def no_thread(*_args):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(rt, "_schedule", no_thread)
    GATES["u"].set()
    ended = jobs.wait(project, down.job_id, timeout=20, config=cfg)
    assert ended.status.value == "failed"
    assert "could not start the job in this process" in (ended.error or "")
    assert wait_until(lambda: idle(project, cfg), what="the runtime to let the step go")


def _x_step(project, params):
    return {"pid": os.getpid()}


def test_resubmitting_a_waiting_job_whose_process_died_runs_it_here(project, cfg):
    # Another process enqueued a job after ours and died before it ran: the
    # same enqueue from this process runs it (as enqueue does for a dead
    # duplicate), instead of answering with the dead process's job.
    GATES["d"] = threading.Event()
    up = jobs.enqueue(
        project, "p.gate", {"name": "up", "gate": "d"}, dispatch=HERE_BODIES, config=cfg
    )
    theirs = _enqueued_by_a_process_that_dies(project, cfg, up.job_id, {"n": 1})
    try:
        ours = jobs.enqueue(
            project, "x.step", {"n": 1}, after=[up.job_id], dispatch={"x.step": _x_step}, config=cfg
        )
        assert ours.job_id == theirs
    finally:
        GATES["d"].set()
    done = jobs.wait(project, ours.job_id, timeout=30, config=cfg)
    assert done.status.value == "succeeded" and done.result["pid"] == HERE
