"""Pipelines on both stores, with real worker processes: chains, fan-out and
fan-in with ``inputs``, refusals with nothing written, failures cancelling
what comes after (and ``allow_failure``), cancel, resubmission, retry, the
caller's process gone, and ``enqueue(after=...)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nw import jobs
from nw.errors import InvalidInput, UnknownKind
from nw.jobs import BudgetExceeded, JobsConfig
from tests.conftest import stored_jobs
from tests.fixtures import pipeline_bodies
from tests.helpers import pipeline_ended, wait_until
from tests.integration.workers import ROOT, start_worker, stop

IMPORT = ("--import", "tests.fixtures.pipeline_bodies")


@pytest.fixture(autouse=True)
def _kinds():
    pipeline_bodies.register_all()


@pytest.fixture
def worker(project, cfg):
    proc = start_worker(project, max_concurrent=4, database_url=cfg.database_url, extra=IMPORT)
    yield proc
    stop(proc)


def ran(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def step(name, log, *, after=(), kind="p.step", **params):
    return {"kind": kind, "params": {"name": name, "log": str(log), **params}, "after": list(after)}


def test_a_chain_runs_in_order_and_ends_succeeded(project, cfg, worker, tmp_path):
    log = tmp_path / "ran.log"
    steps = {
        "storyboard": step("storyboard", log),
        "panels": step("panels", log, after=["storyboard"]),
        "animation": step("animation", log, after=["panels"]),
    }
    p = jobs.enqueue_pipeline(project, steps, label="film", config=cfg)
    assert p.created and p.label == "film" and len(p.steps) == 3
    # (what a waiting step says is read where no worker runs: test_pipelines_api.py)
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.status == "succeeded" and done.pct == 100.0
    assert ran(log) == ["storyboard", "panels", "animation"]
    starts = [done.step(n).job.started_at for n in ("storyboard", "panels", "animation")]
    finishes = [done.step(n).job.finished_at for n in ("storyboard", "panels", "animation")]
    assert finishes[0] <= starts[1] and finishes[1] <= starts[2]
    # every step's job says which pipeline it belongs to
    job = jobs.get_job(project, done.step("panels").job.job_id, config=cfg)
    assert job.pipeline_id == p.pipeline_id and job.step == "panels"


def test_fan_out_then_fan_in_receives_every_upstream_result(project, cfg, worker, tmp_path):
    log = tmp_path / "ran.log"
    steps = {"board": step("board", log)}
    for i in range(6):
        steps[f"panel{i}"] = step(f"panel{i}", log, after=["board"], n=i)
    steps["cut"] = step("cut", log, kind="p.join", after=[f"panel{i}" for i in range(6)])
    p = jobs.enqueue_pipeline(project, steps, config=cfg)
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.status == "succeeded"
    cut = done.step("cut").job
    assert cut.result["sum"] == sum(range(6))
    assert sorted(cut.result["inputs"]) == [f"panel{i}" for i in range(6)]
    assert ran(log)[0] == "board" and ran(log)[-1] == "cut" and len(ran(log)) == 8


@pytest.mark.parametrize(
    ("steps", "error", "words"),
    [
        (
            {"a": {"kind": "p.step", "after": ["b"]}, "b": {"kind": "p.step", "after": ["a"]}},
            InvalidInput,
            "pipeline has a cycle: ",
        ),
        ({"a": {"kind": "p.step", "after": ["nope"]}}, InvalidInput, "unknown step 'nope'"),
        (
            {"a": {"kind": "p.step"}, "b": {"kind": "no.such", "after": ["a"]}},
            UnknownKind,
            "step 'b'",
        ),
        ({"a": {"kind": "p.step", "params": {"x": "\x00"}}}, InvalidInput, "step 'a'"),
        ({}, InvalidInput, "at least one step"),
    ],
)
def test_a_refused_pipeline_writes_nothing(project, cfg, steps, error, words):
    jobs.enqueue(project, "p.step", {"name": "before"}, config=cfg)  # the store exists
    with pytest.raises(error) as got:
        jobs.enqueue_pipeline(project, steps, config=cfg)
    message = str(got.value)
    assert words in message and "\n" not in message
    assert stored_jobs(project, cfg) == 1


def test_a_failed_step_cancels_what_comes_after_unless_allow_failure(
    project, cfg, worker, tmp_path
):
    log = tmp_path / "ran.log"
    steps = {
        "board": step("board", log),
        "panel": step("panel", log, kind="p.fail", after=["board"]),
        "anim": step("anim", log, after=["panel"]),
        "upscale": step("upscale", log, after=["anim"]),
        "report": {
            "kind": "p.join",
            "params": {"name": "report", "log": str(log)},
            "after": [{"step": "panel", "allow_failure": True}, "board"],
        },
    }
    p = jobs.enqueue_pipeline(project, steps, config=cfg)
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.status == "failed"
    assert done.step("panel").job.status == jobs.FAILED
    for name in ("anim", "upscale"):  # transitively, never run
        job = done.step(name).job
        assert job.status == jobs.CANCELLED and job.error_kind == "cancelled"
        assert job.error == "cancelled: upstream step 'panel' failed"
    report = done.step("report").job
    assert report.status == jobs.SUCCEEDED
    assert report.result["inputs"]["panel"] is None and report.result["inputs"]["board"]["n"] == 1
    assert sorted(ran(log)) == ["board", "panel", "report"]


def test_cancel_pipeline_cancels_every_step_not_finished(project, cfg, worker, tmp_path):
    log, gate = tmp_path / "ran.log", tmp_path / "open"
    steps = {
        "board": step("board", log, kind="p.gate", open=str(gate)),
        "panel": step("panel", log, after=["board"]),
        "anim": step("anim", log, after=["panel"]),
    }
    p = jobs.enqueue_pipeline(project, steps, config=cfg)
    wait_until(
        lambda: (
            jobs.get_pipeline(project, p.pipeline_id, config=cfg).step("board").job.status
            == jobs.RUNNING
        )
    )
    got = jobs.cancel_pipeline(project, p.pipeline_id, config=cfg)
    assert got.step("panel").job.status == jobs.CANCELLED
    gate.touch()
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.status == "cancelled"
    assert {s.job.status for s in done.steps} == {jobs.CANCELLED}
    assert "panel" not in ran(log) and "anim" not in ran(log)


def test_resubmitting_the_same_steps_returns_the_same_pipeline(project, cfg, tmp_path):
    steps = {"a": step("a", tmp_path / "log"), "b": step("b", tmp_path / "log", after=["a"])}
    first = jobs.enqueue_pipeline(project, steps, config=cfg)
    again = jobs.enqueue_pipeline(project, dict(reversed(list(steps.items()))), config=cfg)
    assert again.pipeline_id == first.pipeline_id and first.created and not again.created
    assert [s.job.job_id for s in again.steps] == [s.job.job_id for s in first.steps]
    assert stored_jobs(project, cfg) == 2
    other = jobs.enqueue_pipeline(project, {**steps, "c": step("c", tmp_path / "log")}, config=cfg)
    assert other.pipeline_id != first.pipeline_id


def failed_at_panel(project, cfg, log, ok):
    """board -> panel -> anim, ended failed: panel fails until ``ok`` exists,
    which stopped anim."""
    steps = {
        "board": step("board", log),
        "panel": step("panel", log, kind="p.fail", after=["board"], ok_file=str(ok)),
        "anim": step("anim", log, after=["panel"]),
    }
    p = jobs.enqueue_pipeline(project, steps, config=cfg)
    assert pipeline_ended(project, cfg, p.pipeline_id).status == "failed"
    return p


def test_retry_runs_again_only_what_did_not_succeed(project, cfg, worker, tmp_path):
    log, ok = tmp_path / "ran.log", tmp_path / "ok"
    p = failed_at_panel(project, cfg, log, ok)
    assert ran(log) == ["board", "panel"]
    ok.touch()  # the cause is fixed
    again = jobs.retry_job(project, p.step("panel").job.job_id, config=cfg)
    assert again.status != jobs.FAILED  # a new run (queued, or claimed already)
    done = pipeline_ended(project, cfg, p.pipeline_id)
    assert done.status == "succeeded"
    assert ran(log) == ["board", "panel", "panel", "anim"]  # board was not run again
    # a whole retry of a succeeded pipeline runs nothing
    jobs.retry_pipeline(project, p.pipeline_id, config=cfg)
    assert pipeline_ended(project, cfg, p.pipeline_id).status == "succeeded"
    assert len(ran(log)) == 4


def test_a_bulk_retry_runs_a_stopped_step_after_its_upstream_again(project, cfg, worker, tmp_path):
    # Given a pipeline whose middle step failed and stopped the step after it
    log, ok = tmp_path / "ran.log", tmp_path / "ok"
    p = failed_at_panel(project, cfg, log, ok)
    ok.touch()  # the cause is fixed
    # When the operator retries every cancelled job in bulk (the stopped step only)
    again = jobs.retry_jobs(project, status="cancelled", config=cfg)
    assert [j.job_id for j in again] == [p.step("anim").job.job_id]
    # Then the step waits on its upstream again, which runs first: the stopped
    # step never runs before what it comes after (nor without its inputs)
    jobs.retry_jobs(project, status="failed", config=cfg)
    assert pipeline_ended(project, cfg, p.pipeline_id).status == "succeeded"
    assert ran(log) == ["board", "panel", "panel", "anim"]


def test_the_whole_pipeline_is_gated_against_the_budget(project, cfg, tmp_path):
    jobs.enqueue(project, "p.step", {"name": "before"}, config=cfg)
    paid = {"estimated_usd": 0.5}
    steps = {f"s{i}": {"kind": "p.step", "params": {"name": f"s{i}", **paid}} for i in range(3)}
    quote = jobs.estimate_pipeline(project, steps, config=cfg)
    assert quote["estimated_usd"] == 1.5 and not quote["lower_bound"]
    capped = JobsConfig(**{**cfg.__dict__, "budget_usd": 1.2})
    with pytest.raises(BudgetExceeded):
        jobs.enqueue_pipeline(project, steps, config=capped)
    assert stored_jobs(project, cfg) == 1  # all or nothing
    jobs.set_budget(project, 1.2, config=cfg)  # a stored budget too
    try:
        with pytest.raises(BudgetExceeded):
            jobs.enqueue_pipeline(project, steps, config=cfg)
        assert stored_jobs(project, cfg) == 1
        assert jobs.enqueue_pipeline(project, dict(list(steps.items())[:2]), config=cfg).created
    finally:  # on PostgreSQL a budget is the database's
        jobs.remove_budget(project, config=cfg)


def test_a_pipeline_completes_with_its_callers_process_gone(project, cfg, tmp_path):
    log = tmp_path / "ran.log"
    steps = {
        "a": step("a", log),
        "b": step("b", log, after=["a"]),
        "c": step("c", log, kind="p.join", after=["a", "b"]),
    }
    code = (
        "import json, sys; from nw import jobs, Project; from nw.jobs import JobsConfig;"
        "import tests.fixtures.pipeline_bodies;"
        "p = jobs.enqueue_pipeline(Project(sys.argv[1]), json.loads(sys.argv[2]),"
        " config=JobsConfig(database_url=sys.argv[3] or None)); print(p.pipeline_id)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(project.root), json.dumps(steps), cfg.database_url or ""],
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    pipeline_id = done.stdout.strip()
    assert ran(log) == []  # the caller exited before anything ran
    proc = start_worker(project, database_url=cfg.database_url, extra=IMPORT)
    try:
        got = pipeline_ended(project, cfg, pipeline_id)
    finally:
        stop(proc)
    assert got.status == "succeeded" and ran(log) == ["a", "b", "c"]


def test_enqueue_after_waits_on_jobs_and_gets_their_results_by_id(project, cfg, worker, tmp_path):
    log = tmp_path / "ran.log"
    first = jobs.enqueue(project, "p.step", {"name": "first", "log": str(log), "n": 2}, config=cfg)
    second = jobs.enqueue(
        project, "p.step", {"name": "second", "log": str(log), "n": 3}, config=cfg
    )
    join = jobs.enqueue(
        project,
        "p.join",
        {"name": "join", "log": str(log)},
        after=[first.job_id, second.job_id],
        config=cfg,
    )
    done = wait_until(
        lambda: (j := jobs.get_job(project, join.job_id, config=cfg)).is_terminal and j, timeout=30
    )
    assert done.status == jobs.SUCCEEDED and done.result["sum"] == 5
    assert set(done.result["inputs"]) == {first.job_id, second.job_id}
    # after a job that already ended: at once; after a failed one: cancelled at once
    late = jobs.enqueue(
        project, "p.step", {"name": "late", "log": str(log)}, after=[join.job_id], config=cfg
    )
    assert wait_until(
        lambda: jobs.get_job(project, late.job_id, config=cfg).status == jobs.SUCCEEDED, timeout=30
    )
    with pytest.raises(InvalidInput, match="after names no job"):
        jobs.enqueue(project, "p.step", {"name": "x"}, after=["0" * 64], config=cfg)


def test_the_async_twins(project, cfg, tmp_path):
    import asyncio

    from nw.jobs import aio

    steps = {"a": step("a", tmp_path / "log"), "b": step("b", tmp_path / "log", after=["a"])}

    async def main():
        quoted = await aio.estimate_pipeline(project, steps, config=cfg)
        made = await aio.enqueue_pipeline(project, steps, config=cfg)
        got = await aio.get_pipeline(project, made.pipeline_id, config=cfg)
        gone = await aio.cancel_pipeline(project, made.pipeline_id, config=cfg)
        return quoted, made, got, gone

    quoted, made, got, gone = asyncio.run(main())
    assert quoted["pipeline_id"] == made.pipeline_id == got.pipeline_id
    assert got.status == "queued" and gone.status == "cancelled"


def test_a_thousand_steps_are_one_transaction_and_a_refusal_writes_none(project, cfg, monkeypatch):
    from nw.jobs.stores import shared_store

    jobs.enqueue(project, "p.step", {"name": "before"}, config=cfg)
    store = shared_store(project, cfg, create=True)
    calls = []
    real = store.create_many
    monkeypatch.setattr(store, "create_many", lambda *a, **k: calls.append(1) or real(*a, **k))
    steps = {"root": {"kind": "p.step", "params": {"name": "root"}}}
    steps |= {
        f"s{i}": {"kind": "p.step", "params": {"i": i}, "after": ["root"]} for i in range(998)
    }
    steps["join"] = {"kind": "p.join", "after": [f"s{i}" for i in range(998)]}
    p = jobs.enqueue_pipeline(project, steps, config=cfg)
    assert calls == [1] and len(p.steps) == 1000 and stored_jobs(project, cfg) == 1001
    assert p.step("join").job.after is not None and len(p.step("join").job.after) == 998
    # the same, one more step with an unknown kind at the very end: nothing at all
    bad = {**steps, "zz": {"kind": "no.such", "after": ["join"]}}
    with pytest.raises(UnknownKind):
        jobs.enqueue_pipeline(project, bad, config=cfg)
    assert stored_jobs(project, cfg) == 1001 and calls == [1]


def test_approval_is_asked_for_the_whole_pipeline_not_each_step(project, cfg, tmp_path):
    from nw.jobs import ApprovalRequired

    jobs.set_approval(project, threshold_usd=1.0, mode="required", config=cfg)
    try:
        # three steps of $0.40: each under the threshold, the pipeline over it
        steps = {
            f"s{i}": {"kind": "p.step", "params": {"name": f"s{i}", "estimated_usd": 0.4}}
            for i in range(3)
        }
        with pytest.raises(ApprovalRequired):
            jobs.enqueue_pipeline(project, steps, config=cfg)
        assert stored_jobs(project, cfg) == 0
        assert jobs.estimate_pipeline(project, steps, config=cfg)["requires_approval"]
        made = jobs.enqueue_pipeline(project, steps, approved=True, config=cfg)
        assert made.created and made.quote["estimated_usd"] == pytest.approx(1.2)
    finally:  # on PostgreSQL the approval policy is the database's
        jobs.set_approval(project, threshold_usd=None, mode="advisory", config=cfg)


def test_the_stored_approval_threshold_decides_the_estimate(project, cfg, tmp_path):
    from nw.jobs import ApprovalRequired

    # three steps of $0.20: $0.60, under the config's threshold ($1.00)
    steps = {
        f"s{i}": {"kind": "p.step", "params": {"name": f"s{i}", "estimated_usd": 0.2}}
        for i in range(3)
    }
    assert not jobs.estimate_pipeline(project, steps, config=cfg)["requires_approval"]
    try:
        jobs.set_approval(project, threshold_usd=0.5, mode="advisory", config=cfg)
        assert jobs.estimate_pipeline(project, steps, config=cfg)["requires_approval"]
        jobs.set_approval(project, threshold_usd=0.5, mode="required", config=cfg)
        assert jobs.estimate_pipeline(project, steps, config=cfg)["requires_approval"]
        with pytest.raises(ApprovalRequired):
            jobs.enqueue_pipeline(project, steps, config=cfg)
        assert stored_jobs(project, cfg) == 0
        # a stored threshold above the config's: $1.20 needs no approval
        jobs.set_approval(project, threshold_usd=5.0, mode="advisory", config=cfg)
        dear = {
            name: {**s, "params": {**s["params"], "estimated_usd": 0.4}}
            for name, s in steps.items()
        }
        assert not jobs.estimate_pipeline(project, dear, config=cfg)["requires_approval"]
        jobs.set_approval(project, threshold_usd=0.5, mode="required", config=cfg)
        made = jobs.enqueue_pipeline(project, steps, approved=True, config=cfg)
        assert made.created
    finally:  # on PostgreSQL the approval policy is the database's
        jobs.set_approval(project, threshold_usd=None, mode="advisory", config=cfg)


def test_each_step_keeps_enqueues_options_and_the_pipelines_actor(project, cfg, tmp_path):
    steps = {
        "a": {"kind": "p.step", "params": {"name": "a"}, "priority": 5, "limit_key": "prov:x"},
        "b": {"kind": "p.step", "params": {"name": "b"}, "after": ["a"], "label": "the second"},
    }
    p = jobs.enqueue_pipeline(project, steps, actor="ann", label="opts", config=cfg)
    a, b = p.step("a").job, p.step("b").job
    assert (a.priority, a.limit_key, a.actor) == (5, "prov:x", {"id": "ann"})
    assert b.label == "the second" and b.actor == {"id": "ann"} and b.after == [a.job_id]
    assert p.actor == {"id": "ann"} and p.label == "opts"
    with pytest.raises(InvalidInput, match="step 'a'"):
        jobs.enqueue_pipeline(project, {"a": {"kind": "p.step", "priority": "high"}}, config=cfg)
