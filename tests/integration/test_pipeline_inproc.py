"""Pipelines of the in-process tier (``dispatch=``), on both stores: a waiting
step holds no pool thread, its process starts it when the store releases it
(no worker claims it, even one serving its kind), inputs reach it, a failure
or a cancel lets it go, and its process's death ends it instead of leaving it
waiting forever."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading

import pytest

from nw import jobs
from nw.jobs.execution.runtimes import existing_runtime
from nw.jobs.stores import store_location
from tests.fixtures import pipeline_bodies
from tests.helpers import wait_until
from tests.integration.workers import ROOT, start_worker, stop

IMPORT = ("--import", "tests.fixtures.pipeline_bodies")
HERE = os.getpid()


@pytest.fixture(autouse=True)
def _kinds():
    pipeline_bodies.register_all()


def _here(project, params):
    """A step body of this process: says which process ran it."""
    return {"name": params["name"], "n": params.get("n", 1), "pid": os.getpid()}


def _join(project, params, *, inputs):
    return {"sum": sum(v["n"] for v in inputs.values()), "from": sorted(inputs), "pid": os.getpid()}


def _fail(project, params):
    raise RuntimeError(f"step {params['name']} broke")


GATES: dict[str, threading.Event] = {}


def _gated(project, params):
    """Held running until the test opens its gate."""
    if not GATES[params["gate"]].wait(30):
        raise TimeoutError("the gate was never opened")
    return {"name": params["name"], "n": 1}


HERE_BODIES = {"p.step": _here, "p.join": _join, "p.fail": _fail, "p.gate": _gated}


def ended(project, cfg, pipeline_id, timeout=30.0):
    return wait_until(
        lambda: (p := jobs.get_pipeline(project, pipeline_id, config=cfg)) and p.is_terminal and p,
        timeout=timeout,
        what=f"pipeline {pipeline_id} to end",
    )


def idle(project, cfg) -> bool:
    rts = existing_runtime(store_location(project, cfg))
    return rts is not None and rts.wait_idle(0)


def test_steps_run_here_even_beside_a_worker_of_their_kinds(project, cfg):
    # A worker that serves p.step and p.join runs beside this process: the
    # released steps have no due time, so it claims none of them.
    proc = start_worker(project, max_concurrent=4, database_url=cfg.database_url, extra=IMPORT)
    try:
        steps = {"board": {"kind": "p.step", "params": {"name": "board", "n": 0}}}
        for i in range(4):
            steps[f"panel{i}"] = {
                "kind": "p.step",
                "params": {"name": f"panel{i}", "n": i},
                "after": ["board"],
            }
        steps["cut"] = {"kind": "p.join", "params": {}, "after": [f"panel{i}" for i in range(4)]}
        p = jobs.enqueue_pipeline(project, steps, dispatch=HERE_BODIES, config=cfg)
        done = ended(project, cfg, p.pipeline_id)
    finally:
        stop(proc)
    assert done.status == "succeeded"
    assert {s.job.result["pid"] for s in done.steps} == {HERE}
    cut = done.step("cut").job.result
    assert cut["sum"] == 6 and cut["from"] == [f"panel{i}" for i in range(4)]
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


def test_a_failed_step_stops_the_waiting_ones_and_they_are_let_go(project, cfg):
    steps = {
        "a": {"kind": "p.fail", "params": {"name": "a"}},
        "b": {"kind": "p.step", "params": {"name": "b"}, "after": ["a"]},
        "c": {"kind": "p.step", "params": {"name": "c"}, "after": ["b"]},
    }
    p = jobs.enqueue_pipeline(project, steps, dispatch=HERE_BODIES, config=cfg)
    done = ended(project, cfg, p.pipeline_id)
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
    done = ended(project, cfg, p.pipeline_id)
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


def test_a_step_waiting_in_a_dead_process_is_ended_not_left_waiting(project, cfg, tmp_path):
    # The process that holds the in-process steps is killed while its first
    # step runs: readers end the steps (orphaned), the pipeline does not
    # stay "running" forever.
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
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(project.root), cfg.database_url or ""],
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        pipeline_id = proc.stdout.readline().strip()
        assert pipeline_id.startswith("pl-")
        wait_until(
            lambda: jobs.get_pipeline(project, pipeline_id, config=cfg).status == "running",
            what="a to run",
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    done = ended(project, cfg, pipeline_id, timeout=60)
    assert done.status in ("failed", "cancelled")
    assert all(s.job.is_terminal for s in done.steps)
