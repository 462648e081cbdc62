"""``nw-jobs demo``: a small simulated render pipeline, run for real and shown live.

Every job here is a real job on the embedded store of a real project folder
(default ``./nw-demo``): the whole pipeline (storyboard, then panels, then
animations; a voice and a score beside them) is enqueued at once with
``enqueue_pipeline``, quoted and timed as a whole, run by a worker process the
demo starts (``--import nw.demo_kinds``), each step released by the store
when the steps it comes after have succeeded, observed through
``get_pipeline``, one step cancelled through ``cancel_job``. Only the work is
simulated (sleeps that report stages and costs). The pipeline covers each
thing a render surface has to show: stages, an exact cost, an unpriceable
call (a lower-bound cost), a cache hit, a refusal, a cancellation, and jobs
queued behind the concurrency cap.

ETAs are learned from the durations of finished jobs, per ``model|operation``
key; the demo lowers ``n_min`` to 2 so that the second run already shows
``learned`` ETAs for the panels and the animations (each run teaches each of
those keys two samples; a cache hit teaches nothing). Each run's steps carry
its number (``demo_run``), so a rerun is a new pipeline instead of returning
the old one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from nw import Project
from nw.cli.render import cost_text, jobs_table, plain_line, usd
from nw.jobs import (
    JobCancelled,
    JobRefused,
    JobsConfig,
    Pipeline,
    cancel_job,
    cancel_pipeline,
    enqueue_pipeline,
    get_pipeline,
    list_jobs,
    to_dict,
)

DEMO_DIR = "nw-demo"
RUN_PARAM = "demo_run"
DEMO_CONFIG = JobsConfig(n_min=2, max_concurrent=4)
"""``n_min=2``: a second run shows learned ETAs; 4 bodies at once, so one job queues."""


def simulated_render(
    project: Project,
    params: Mapping[str, Any],
    *,
    on_event: Callable[[Any], None],
    should_cancel: Callable[[], bool],
) -> dict[str, Any]:
    """A render body driven by its params' ``sim`` block: stages, sleeps, a cost.

    It reports each stage as it starts with ``stage_index`` = stages finished
    (the 0-based index of the stage now starting), checks for a cancel
    at every boundary, and ends the way ``sim`` says: a result with its cost,
    a cache hit, or a refusal.
    """
    sim = params["sim"]
    stages: Sequence[str] = sim["stages"]
    pause = float(sim["stage_s"]) / float(sim.get("speed", 1.0))
    if sim.get("cache_hit"):
        on_event({"kind": "cache_hit", "message": "identical render found in the cache"})
    for index, stage in enumerate(stages):
        if should_cancel():
            raise JobCancelled(f"stopped before {stage}")
        on_event({"stage_index": index, "stage_count": len(stages), "current_transform": stage})
        _sleep_watching(pause, should_cancel)
        if sim.get("refuse_at") == stage:
            raise JobRefused(sim["refuse"], detail={"stage": stage})
    if should_cancel():
        raise JobCancelled("stopped before delivery")
    on_event({"stage_index": len(stages), "stage_count": len(stages), "current_transform": "done"})
    result: dict[str, Any] = {
        "cost_usd_actual": float(sim.get("usd", 0.0)),
        "has_unknown_costs": bool(sim.get("unknown_cost")),
        "artifact_ref": f"{params.get('output_kind', 'asset')}/{sim['slug']}",
    }
    if sim.get("cache_hit"):
        result |= {"cache_hit": True, "cache_hit_savings_usd": float(sim.get("saves", 0.0))}
    return result


def _sleep_watching(seconds: float, should_cancel: Callable[[], bool]) -> None:
    """Sleep in small steps so a cancel lands within a tenth of a second."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if should_cancel():
            return
        time.sleep(min(left, 0.1))


@dataclass(frozen=True)
class Step:
    """One job of the pipeline and the steps it waits for."""

    name: str
    kind: str
    params: dict[str, Any]
    after: tuple[str, ...] = ()
    cancel_at_stage: int | None = None
    """The demo cancels this job once it has finished this many stages."""


def _sim(slug: str, stages: Sequence[str], stage_s: float, **extra: Any) -> dict[str, Any]:
    return {"slug": slug, "stages": list(stages), "stage_s": stage_s, **extra}


def pipeline(speed: float = 1.0) -> list[Step]:
    """The demo's jobs: a storyboard, three panels, two animations, a voice, a score."""
    panel_stages = ("compose", "render", "upscale")
    anim_stages = ("upload", "generate", "interpolate", "download")

    def panel(n: int, title: str, stage_s: float = 0.55, **sim: Any) -> Step:
        return Step(
            f"panel{n}",
            "panel.render",
            {
                "title": f"Panel {n} — {title}",
                "model": "flux-schnell",
                "operation": "t2i",
                "output_kind": "image",
                "estimated_usd": 0.04,
                "sim": _sim(f"panel-{n}.png", panel_stages, stage_s, speed=speed, **sim),
                **({"expected_cache_hit": True} if sim.get("cache_hit") else {}),
            },
            after=("storyboard",),
        )

    def animate(n: int, **sim: Any) -> Step:
        return Step(
            f"animate{n}",
            "panel.animate",
            {
                "title": f"Animate panel {n}",
                "model": "kling-v2",
                "operation": "i2v",
                "output_kind": "video",
                "duration_s": 5,
                "estimated_usd": 0.35,
                "sim": _sim(f"panel-{n}.mp4", anim_stages, 0.6, speed=speed, usd=0.35, **sim),
            },
            after=(f"panel{n}",),
        )

    return [
        Step(
            "storyboard",
            "script.storyboard",
            {
                "title": "Storyboard: 'The Lighthouse Keeper'",
                "model": "claude-sonnet",
                "operation": "storyboard",
                "output_kind": "text",
                "estimated_usd": 0.012,
                "sim": _sim(
                    "storyboard.json",
                    ("outline", "beats", "shot list"),
                    0.45,
                    speed=speed,
                    usd=0.012,
                ),
            },
        ),
        panel(1, "the harbour at dawn", usd=0.04),
        panel(2, "the keeper's stair", usd=0.04),
        panel(3, "the lamp room", stage_s=0.15, usd=0.0, saves=0.04, cache_hit=True),
        animate(1),
        # The upscaler's rate is not in the price table: the total is a lower bound.
        animate(2, unknown_cost=True),
        Step(
            "narration",
            "voice.speak",
            {
                "title": "Narration, scene 1",
                "model": "elevenlabs",
                "operation": "tts",
                "output_kind": "audio",
                "estimated_usd": 0.03,
                "sim": _sim(
                    "narration.wav",
                    ("cast", "synthesize"),
                    0.5,
                    speed=speed,
                    refuse_at="cast",
                    refuse="no voice is cast for the narrator 'Mara'; pick one in the cast sheet",
                ),
            },
            after=("storyboard",),
        ),
        Step(
            "score",
            "music.score",
            {
                "title": "Score: main theme",
                "model": "suno",
                "operation": "song",
                "output_kind": "audio",
                "estimated_usd": 0.2,
                "sim": _sim(
                    "theme.mp3",
                    ("motif", "arrange", "orchestrate", "mix", "master"),
                    0.7,
                    speed=speed,
                    usd=0.2,
                ),
            },
            after=("storyboard",),
            cancel_at_stage=2,
        ),
    ]


def next_run_number(project: Project, config: JobsConfig) -> int:
    """1 + the highest run number among this project's demo jobs."""
    highest = 0
    for job in list_jobs(project, limit=10_000, config=config):
        run = job.params.get(RUN_PARAM)
        if isinstance(run, int) and not isinstance(run, bool):
            highest = max(highest, run)
    return highest + 1


def start_worker(project: Project) -> subprocess.Popen:
    """The worker process that runs the demo's steps (4 at once, so one queues)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nw.jobs.execution.worker",
            "--project",
            str(project.root),
            "--import",
            "nw.demo_kinds",
            "--max-concurrent",
            str(DEMO_CONFIG.max_concurrent),
            "--log-level",
            "ERROR",
        ],
        env={k: v for k, v in os.environ.items() if k != "NW_JOBS_DATABASE_URL"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _await_worker(
    project: Project, worker: subprocess.Popen, config: JobsConfig, deadline: float
) -> None:
    """Until the worker has announced itself (so the queue's wait can be told
    and the pipeline's first ETA is one), or it exited, or the deadline."""
    from nw.jobs import workers

    while time.monotonic() < deadline and worker.poll() is None:
        if any(w.get("role") == "worker" for w in workers(project, config=config)):
            return
        time.sleep(0.05)


@dataclass
class DemoRun:
    """Drives one run: the pipeline enqueued whole, a cancel on cue, observed."""

    project: Project
    run: int
    steps: list[Step]
    config: JobsConfig = DEMO_CONFIG
    pipeline: Pipeline | None = None
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)

    def start(self) -> Pipeline:
        """Enqueue the whole pipeline: one quote, one transaction."""
        spec = {
            s.name: {
                "kind": s.kind,
                "params": {**s.params, RUN_PARAM: self.run},
                "after": list(s.after),
            }
            for s in self.steps
        }
        self.pipeline = enqueue_pipeline(
            self.project, spec, label=f"The Lighthouse Keeper, run {self.run}", config=self.config
        )
        self._refresh()
        return self.pipeline

    def tick(self) -> None:
        self._refresh()
        for step in self.steps:
            if step.cancel_at_stage is not None and step.name not in self.cancelled:
                job = self.jobs.get(step.name)
                stage = ((job or {}).get("progress") or {}).get("stage_index")
                if job and job["status"] == "running" and (stage or 0) >= step.cancel_at_stage:
                    cancel_job(self.project, job["job_id"], config=self.config)
                    self.cancelled.add(step.name)
        self._refresh()

    def _refresh(self) -> None:
        if self.pipeline is None:
            return
        got = get_pipeline(self.project, self.pipeline.pipeline_id, config=self.config)
        if got is not None:
            self.pipeline = got
            self.jobs = {s.name: to_dict(s.job) for s in got.steps}

    @property
    def finished(self) -> bool:
        return self.pipeline is not None and self.pipeline.is_terminal

    def rows(self) -> list[dict[str, Any]]:
        return [self.jobs[s.name] for s in self.steps if s.name in self.jobs]

    def cancel_all(self) -> None:
        if self.pipeline is not None:
            cancel_pipeline(self.project, self.pipeline.pipeline_id, config=self.config)


def pipeline_text(p: Pipeline | None) -> str:
    """The pipeline as a whole: its quote, what it spent, its ETA and progress."""
    if p is None:
        return "pipeline: enqueueing"
    q = p.quote
    quote = ("≥ " if q.get("lower_bound") else "") + usd(float(q.get("estimated_usd") or 0.0))
    if p.is_terminal:
        eta = p.status
    elif p.eta_s is None:
        eta = "ETA estimating…"
    else:
        eta = f"ETA ~{p.eta_s:.0f}s ({p.eta_confidence})"
    return f"pipeline {p.label}: quote {quote} for {len(p.steps)} steps · {eta} · {p.pct:.0f}% done"


def totals(jobs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Spend (with its honesty flag), cache savings, and counts by status."""
    spent = sum((j.get("cost") or {}).get("actual_usd") or 0.0 for j in jobs)
    lower = any((j.get("cost") or {}).get("actual_is_lower_bound") for j in jobs)
    saved = sum((j.get("cost") or {}).get("cache_hit_savings_usd") or 0.0 for j in jobs)
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    learned = sum(1 for j in jobs if str(j.get("confidence") or "").startswith("learned"))
    return {
        "spent_usd": round(spent, 4),
        "spent_is_lower_bound": lower,
        "saved_usd": round(saved, 4),
        "counts": counts,
        "learned_etas": learned,
    }


def totals_text(jobs: Sequence[Mapping[str, Any]]) -> str:
    t = totals(jobs)
    spent = f"{'≥ ' if t['spent_is_lower_bound'] else ''}{usd(t['spent_usd'])}"
    counts = ", ".join(f"{n} {status}" for status, n in sorted(t["counts"].items()))
    return (
        f"spent {spent}"
        + (" (one call could not be priced)" if t["spent_is_lower_bound"] else "")
        + f" · saved {usd(t['saved_usd'])} by the cache · {counts}"
        + f" · {t['learned_etas']} learned ETA(s)"
    )


def frame(run: DemoRun, elapsed_s: float, width: int = 160) -> Group:
    """What the live view shows at one instant: a header, the jobs, the totals."""
    header = Text()
    header.append("nw-jobs demo", style="bold")
    header.append(f" · run {run.run} · {run.project.root.name} · {elapsed_s:4.1f}s")
    table = jobs_table(run.rows(), width=width, show_id=False)
    whole = Text(pipeline_text(run.pipeline), style="bold")
    return Group(header, whole, table, Text(totals_text(run.rows()), style="dim"))


def run_demo(
    root: str | Path = DEMO_DIR,
    *,
    console: Console | None = None,
    plain: bool | None = None,
    speed: float = 1.0,
    timeout_s: float = 120.0,
    config: JobsConfig = DEMO_CONFIG,
) -> dict[str, Any]:
    """Run the pipeline once in ``root`` and show it; returns the final jobs and totals."""
    from nw.jobs.execution.runtimes import shutdown_runtimes

    console = console or Console()
    plain = (not console.is_terminal) if plain is None else plain
    import nw.demo_kinds  # noqa: F401  (registers the demo's kinds here, for the enqueue)

    project = Project.init(root, title="nw-jobs demo")
    run = DemoRun(project, next_run_number(project, config), pipeline(speed), config)
    worker = start_worker(project)
    started = time.monotonic()
    deadline = started + timeout_s
    seen: dict[str, str] = {}

    def plain_tick() -> None:
        for job in run.rows():
            line = plain_line(job)
            # Print a job when its status, stage or cost changes, not every tick.
            gist = f"{job['status']}|{(job.get('progress') or {}).get('current_transform')}|"
            gist += cost_text(job)
            if seen.get(job["job_id"]) != gist:
                seen[job["job_id"]] = gist
                console.print(
                    f"[{time.monotonic() - started:5.1f}s] {line}", highlight=False, soft_wrap=True
                )

    try:
        _await_worker(project, worker, config, deadline=time.monotonic() + 15)
        run.start()
        if plain:
            console.print(f"nw-jobs demo · run {run.run} · {project.root}", highlight=False)
            console.print(pipeline_text(run.pipeline), highlight=False, soft_wrap=True)
            while not run.finished and time.monotonic() < deadline:
                run.tick()
                plain_tick()
                time.sleep(0.1)
        else:
            first = frame(run, 0.0, console.width)
            with Live(first, console=console, refresh_per_second=8, transient=False) as live:
                while not run.finished and time.monotonic() < deadline:
                    run.tick()
                    live.update(frame(run, time.monotonic() - started, console.width))
                    time.sleep(0.1)
                live.update(frame(run, time.monotonic() - started, console.width))
    except KeyboardInterrupt:
        run.cancel_all()
        raise
    finally:
        if not run.finished:
            run.cancel_all()
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        shutdown_runtimes(wait=True)
    jobs = run.rows()
    if plain:
        console.print(pipeline_text(run.pipeline), highlight=False, soft_wrap=True)
        console.print(totals_text(jobs), highlight=False, soft_wrap=True)
    console.print(
        "Run it again: this run taught the ETA model, so the next one shows learned ETAs."
        if run.run == 1
        else "ETAs marked (learned) come from earlier runs' durations.",
        style="dim",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"Look around: nw-jobs list --project {root} · nw-jobs serve --project {root}",
        style="dim",
        highlight=False,
        soft_wrap=True,
    )
    return {
        "project": str(project.root),
        "run": run.run,
        "finished": run.finished,
        "jobs": jobs,
        "totals": totals(jobs),
        "pipeline": None
        if run.pipeline is None
        else {k: v for k, v in run.pipeline.to_dict().items() if k != "steps"},
    }
