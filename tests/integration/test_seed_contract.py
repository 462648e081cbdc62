"""The seed's documented behaviour (nw-jobs-api.txt), one test per item of issue 10.

Each test is written from the seed's text, as a caller who has read only the
seed would write it, and runs on both stores where a store is involved.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
import time
from pathlib import Path

import pytest

import nw
from nw import jobs, plans
from nw.jobs.stores import shared_store
from tests.conftest import postgres_rows
from tests.fixtures import bodies
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop

README = Path(__file__).resolve().parents[2] / "README.md"


def finished(project, job_id, cfg, timeout=30):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.is_terminal and j,
        timeout=timeout,
        what=f"job {job_id[:8]} to finish",
    )


def stored_text(project, cfg) -> str:
    """Everything the project's store holds, as text (to search for a secret)."""
    if cfg.database_url:
        return postgres_rows(project)
    store = shared_store(project, cfg, create=False)
    if store is not None:
        store.close()  # checkpoint the WAL so every byte is in the files read below
    root = Path(project.root)
    return "".join(p.read_bytes().decode("latin-1") for p in root.rglob("*") if p.is_file())


# ----- 1. get_job / cancel_job / get_job_progress: "None if unknown" ---------------


def test_1_an_unknown_id_is_none_and_an_api_closure_can_answer_404(project, cfg):
    known = jobs.enqueue(project, "r", {"i": 1}, dispatch={"r": lambda p, q: {}}, config=cfg)
    finished(project, known.job_id, cfg)

    def api_get(job_id: str) -> tuple[int, dict]:  # a thin /api/jobs/{id} closure
        job = jobs.get_job(project, job_id, config=cfg)
        return (404, {}) if job is None else (200, jobs.to_dict(job))

    for unknown in ("no-such-job", "A" * 64, "../x", "0" * 64, "", "a/b\0"):
        assert jobs.get_job(project, unknown, config=cfg) is None
        assert jobs.cancel_job(project, unknown, config=cfg) is None
        assert jobs.get_job_progress(project, unknown, config=cfg) == []
        assert api_get(unknown)[0] == 404
    assert api_get(known.job_id)[0] == 200
    assert not (Path(project.root).parent / "x").exists()
    with pytest.raises(TypeError):
        jobs.get_job(project, 42, config=cfg)


# ----- 3. predict_total_s(eta_candidates, output_kind, *, durations, ...) -----------


def test_3_predict_total_s_takes_the_seeds_keyword_names():
    durations = {"kling|image_to_video": [10.0, 12.0, 14.0], "video": [90.0]}
    by_keyword = jobs.predict_total_s(
        eta_candidates=["kling|image_to_video", "video"], output_kind="video", durations=durations
    )
    positional = jobs.predict_total_s(
        ["kling|image_to_video", "video"], "video", durations=durations
    )
    assert by_keyword == positional
    p50, p90, confidence = by_keyword
    assert 10.0 <= p50 <= 14.0 and p90 >= p50 and confidence == "learned"


# ----- 4. DurationLearningMiddleware(durations=, index=, lock=, config=) ------------


@pytest.mark.parametrize("kind_of_store", ["dict", "dol"])
def test_4_the_middleware_learns_under_a_plain_au_thread_backend(tmp_path, kind_of_store):
    from au import ComputationStatus, ThreadBackend
    from au.base import FileSystemStore

    if kind_of_store == "dict":
        durations: dict = {}
        lock = threading.Lock()
    else:
        from dol import JsonFiles

        (tmp_path / "durations").mkdir()
        durations = JsonFiles(str(tmp_path / "durations"))
        lock = None  # optional
    config = jobs.JobsConfig(n_min=3)
    candidates = ["kling|image_to_video", "video"]
    index = {}  # job id -> record, as the seed's active-jobs index
    middleware = jobs.DurationLearningMiddleware(
        durations=durations, index=index, lock=lock, config=config
    )
    backend = ThreadBackend(FileSystemStore(str(tmp_path / "au")), middleware=[middleware])

    def render(stop: threading.Event) -> dict:
        stop.wait(0.02)
        return {"ok": True}

    for n in range(4):
        key = f"job-{n}"
        index[key] = {"eta_candidates": candidates, "output_kind": "video", "cached": n == 3}
        backend.launch(render, (threading.Event(),), {}, key)
        wait_until(
            lambda key=key: (
                backend.store[key].status is ComputationStatus.COMPLETED
                and not middleware.is_running(key)
            ),
            what=f"{key} learned",
        )
    learned = list(durations["kling|image_to_video"])
    assert len(learned) == 3  # three renders; the cache hit is not learned
    assert all(s > 0 for s in learned)
    assert "video" not in durations  # a job with specific keys and no units spares it
    p50, _, confidence = jobs.predict_total_s(
        eta_candidates=candidates, output_kind="video", durations=durations, config=config
    )
    assert confidence == "learned" and min(learned) <= p50 <= max(learned)
    as_dict = {"kling|image_to_video": learned}
    assert jobs.predict_total_s(candidates, "video", durations=as_dict, config=config)[0] == p50


# ----- 5. plan identity is falaw.plan_hash ------------------------------------------


def test_5_a_falaw_plan_is_one_job_under_falaws_own_hash(project, cfg, gate):
    falaw = pytest.importorskip("falaw")
    first = falaw.CallPlan(
        tool="generate_image",
        application="fal-ai/flux/dev",
        arguments={"prompt": "un tigre à l'aube, 夜明け", "size": (1024, 768), "n": 1.0},
        output_kind="image",
        metadata={"shot_id": "s1"},
    )
    second = falaw.CallPlan(
        tool="image_to_video",
        application="fal-ai/kling-video/v2.1/standard/image-to-video",
        arguments={"image_url": "<from 0>", "camera": {"moves": [{"pan": -0.5}]}},
        output_kind="video",
        key_extra={"impl_version": 2},
    )
    live = falaw.Plan(calls=(first, second))
    expected = falaw.plan_hash(live)
    assert plans.plan_hash(live) == expected
    job = jobs.enqueue(
        project, "r", {"plan": falaw.plan_to_dict(live)}, dispatch={"r": gate}, config=cfg
    )
    assert job.idempotency_key == expected
    again = jobs.enqueue(project, "r", {"plan": live}, dispatch={"r": gate}, config=cfg)
    assert again.job_id == job.job_id  # a resubmit of the same plan finds the live job
    gate.release.set()
    finished(project, job.job_id, cfg)

    bad = falaw.Plan(
        calls=(
            falaw.CallPlan(
                tool="t", application="m", arguments={"x": float("nan")}, output_kind="image"
            ),
        )
    )
    with pytest.raises(falaw.FalNonCanonicalArgument):
        falaw.plan_hash(bad)
    with pytest.raises(plans.NonCanonicalPlan):
        jobs.enqueue(project, "r", {"plan": bad}, dispatch={"r": gate}, config=cfg)
    assert [j.job_id for j in jobs.list_jobs(project, config=cfg)] == [job.job_id]


# ----- 6. fal credentials captured at enqueue and bound around the body ------------


def test_6_a_body_finds_the_callers_fal_key_through_falaw(project, cfg):
    falaw = pytest.importorskip("falaw")
    ambient, explicit = "fal-ambient-key-0123", "fal-explicit-key-4567"

    def sha(key):
        return hashlib.sha256(key.encode()).hexdigest()

    def reads_key(project, params):
        key = falaw.current_fal_key()
        if params.get("fail"):
            raise RuntimeError(f"fal refused key {key}")
        return {"fal_sha256": sha(key) if key else None}

    def declares_secrets(project, params, *, secrets):
        return {"fal_sha256": sha(secrets["fal"])}

    dispatch = {"r": reads_key, "s": declares_secrets}
    with falaw.using_fal_credentials(ambient):
        plain = jobs.enqueue(project, "r", {"i": 1}, dispatch=dispatch, config=cfg)
        failing = jobs.enqueue(project, "r", {"fail": True}, dispatch=dispatch, config=cfg)
        overridden = jobs.enqueue(
            project, "r", {"i": 2}, dispatch=dispatch, secrets={"fal": explicit}, config=cfg
        )
        declared = jobs.enqueue(project, "s", {"i": 3}, dispatch=dispatch, config=cfg)
    assert falaw.current_fal_key() is None  # the caller's binding ended with its block
    assert finished(project, plain.job_id, cfg).result == {"fal_sha256": sha(ambient)}
    assert finished(project, overridden.job_id, cfg).result == {"fal_sha256": sha(explicit)}
    assert finished(project, declared.job_id, cfg).result == {"fal_sha256": sha(ambient)}
    error = finished(project, failing.job_id, cfg).error
    assert ambient not in error and "***" in error

    # A worker binds its own NW_SECRET_FAL.
    bodies.register_all()
    worker_key = "fal-worker-key-89ab"
    queued = jobs.enqueue(project, "t.falkey", {}, config=cfg)
    worker = start_worker(project, env={"NW_SECRET_FAL": worker_key}, database_url=cfg.database_url)
    try:
        assert finished(project, queued.job_id, cfg).result == {"fal_sha256": sha(worker_key)}
    finally:
        stop(worker)
    text = stored_text(project, cfg)
    for key in (ambient, explicit, worker_key):
        assert key not in text


# ----- 7. stage_index: stages finished, everywhere ----------------------------------


def test_7_the_readme_body_reports_stages_finished_and_every_surface_agrees(project, cfg):
    source = README.read_text()
    body = re.search(r"^def animate\(.*?^    return .*?$", source, re.S | re.M).group(0)
    namespace = {"jobs": jobs, "nw": nw}
    exec(body, namespace)  # the README's own body, as a reader would copy it
    seen = []
    job = jobs.enqueue(
        project,
        "panel.animate",
        {"model": "kling", "operation": "image_to_video"},
        dispatch={"panel.animate": namespace["animate"]},
        on_event=seen.append,
        secrets={"fal": "key-..."},
        config=cfg,
    )
    finished(project, job.job_id, cfg)
    starts = {e["transform"]: e["stage_index"] for e in seen if "transform" in e}
    assert starts == {"upload": 0, "generate": 1, "download": 2}  # finished when each starts
    trail = jobs.get_job_progress(project, job.job_id, config=cfg)
    assert [round(b["pct"], 1) for b in trail] == [0.0, 33.3, 66.7]

    from nw.demo import simulated_render

    demo = []
    sim = {"stages": ["a", "b"], "stage_s": 0.0, "slug": "x"}
    simulated_render(project, {"sim": sim}, on_event=demo.append, should_cancel=lambda: False)
    assert [e["stage_index"] for e in demo if e.get("current_transform") in ("a", "b")] == [0, 1]

    from nw.cli.render import stage_text

    progress = {"stage_index": 1, "stage_count": 3, "current_transform": "generate"}
    assert stage_text({"progress": progress}) == "generate · 1 of 3 done"
    tray = (Path(jobs.__file__).parent / "web" / "static" / "tray.js").read_text()
    assert "${p.stage_index} of ${p.stage_count} done" in tray
    # ... and the README says so in one sentence, beside the body it teaches.
    assert re.search(r"`stage_index` is the number of\s+stages finished", source)


def _body_returned_after_the_request(project, cfg):
    started, cancelled = threading.Event(), threading.Event()

    def stubborn(project, params):  # never looks at should_cancel
        started.set()
        cancelled.wait(10)
        return {"rendered": True}

    job = jobs.enqueue(project, "r", {}, dispatch={"r": stubborn}, config=cfg)
    assert started.wait(5)
    jobs.cancel_job(project, job.job_id, config=cfg)
    cancelled.set()
    return job.job_id, cfg


def _body_raised_the_cancel_exception(project, cfg):
    started = threading.Event()

    def polite(project, params, *, should_cancel):
        started.set()
        while not should_cancel():
            time.sleep(0.01)
        raise jobs.JobCancelled("stopped at a boundary")

    job = jobs.enqueue(project, "r", {}, dispatch={"r": polite}, config=cfg)
    assert started.wait(5)
    jobs.cancel_job(project, job.job_id, config=cfg)
    return job.job_id, cfg


def _cancelled_while_queued(project, cfg):
    jobs.register_kind("seed.later", "tests.fixtures.bodies:noop")
    job = jobs.enqueue(project, "seed.later", {}, config=cfg)  # no worker: it waits
    jobs.cancel_job(project, job.job_id, config=cfg)
    return job.job_id, cfg


def _reaped_while_cancelling(project, cfg):
    jobs.register_kind("seed.lost", "tests.fixtures.bodies:noop", retryable=True, max_attempts=3)
    job = jobs.enqueue(project, "seed.lost", {}, config=cfg)
    store = shared_store(project, cfg, create=False)
    store.claim(["seed.lost"], now=cfg.clock(), runner_id="a-worker-that-dies")
    assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLING
    # the worker never beats again: read it once its beat is past the stale window
    later = dataclasses.replace(cfg, clock=lambda: time.time() + 10 * cfg.heartbeat_stale_s)
    return job.job_id, later


@pytest.mark.parametrize(
    ("how", "says"),
    [
        (_body_returned_after_the_request, "the body had already finished its work"),
        (_body_raised_the_cancel_exception, "stopped at a boundary"),
        (_cancelled_while_queued, "cancelled before start"),
        (_reaped_while_cancelling, "worker lost before the body stopped"),
    ],
    ids=["body-returned", "body-raised-cancel", "while-queued", "reaped-while-cancelling"],
)
def test_2_every_cancelled_job_has_error_kind_cancelled_however_it_stopped(project, cfg, how, says):
    job_id, read_with = how(project, cfg)
    done = wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=read_with)).is_terminal and j,
        what="the cancelled job to finish",
    )
    assert done.status == jobs.CANCELLED
    assert done.error_kind == "cancelled"
    assert says in done.error
