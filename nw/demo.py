"""``nw-jobs demo``: a small simulated render pipeline, run for real and shown live.

Every job here is a real job on the embedded store of a real project folder
(default ``./nw-demo``): enqueued through the facade with an in-process
``dispatch=`` body, observed through ``get_job``, cancelled through
``cancel_job``. Only the work is simulated (sleeps that report stages and
costs). The pipeline covers each thing a render surface has to show: stages,
an exact cost, an unpriceable call (a lower-bound cost), a cache hit, a
refusal, a cancellation, and jobs queued behind the concurrency cap.

ETAs are learned from the durations of finished jobs, per ``model|operation``
key; the demo lowers ``n_min`` to 2 so that the second run already shows
``learned`` ETAs for the panels and the animations (each run teaches each of
those keys two samples; a cache hit teaches nothing). Each run gets its own
idempotency keys (``demo-run<N>-<step>``), so a rerun makes new jobs instead
of returning the old ones.
"""

from __future__ import annotations

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
    cancel_job,
    enqueue,
    get_job,
    list_jobs,
    to_dict,
)

DEMO_DIR = "nw-demo"
KEY_PREFIX = "demo-run"
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
        key = job.idempotency_key
        if key.startswith(KEY_PREFIX):
            head = key[len(KEY_PREFIX) :].split("-", 1)[0]
            if head.isdigit():
                highest = max(highest, int(head))
    return highest + 1


@dataclass
class DemoRun:
    """Drives one run: enqueue steps whose inputs are done, cancel on cue, observe."""

    project: Project
    run: int
    steps: list[Step]
    config: JobsConfig = DEMO_CONFIG
    ids: dict[str, str] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)

    def tick(self) -> None:
        self._refresh()
        for step in self.steps:
            if step.name not in self.ids and all(self._done(dep) for dep in step.after):
                self._enqueue(step)
            if step.cancel_at_stage is not None and step.name not in self.cancelled:
                job = self.jobs.get(step.name)
                stage = ((job or {}).get("progress") or {}).get("stage_index")
                if job and job["status"] == "running" and (stage or 0) >= step.cancel_at_stage:
                    cancel_job(self.project, self.ids[step.name], config=self.config)
                    self.cancelled.add(step.name)
        self._refresh()

    def _enqueue(self, step: Step) -> None:
        job = enqueue(
            self.project,
            step.kind,
            step.params,
            dispatch={step.kind: simulated_render},
            idempotency_key=f"{KEY_PREFIX}{self.run}-{step.name}",
            config=self.config,
        )
        self.ids[step.name] = job.job_id
        self.jobs[step.name] = to_dict(job)

    def _refresh(self) -> None:
        for name, job_id in self.ids.items():
            job = get_job(self.project, job_id, config=self.config)
            if job is not None:
                self.jobs[name] = to_dict(job)

    def _done(self, name: str) -> bool:
        job = self.jobs.get(name)
        return job is not None and job["status"] in ("succeeded", "failed", "cancelled")

    @property
    def finished(self) -> bool:
        return all(self._done(step.name) for step in self.steps)

    def rows(self) -> list[dict[str, Any]]:
        return [self.jobs[s.name] for s in self.steps if s.name in self.jobs]

    def cancel_all(self) -> None:
        for name, job_id in self.ids.items():
            if not self._done(name):
                cancel_job(self.project, job_id, config=self.config)


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
    return Group(header, table, Text(totals_text(run.rows()), style="dim"))


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
    from nw.jobs.execution.runtime import shutdown_runtimes

    console = console or Console()
    plain = (not console.is_terminal) if plain is None else plain
    project = Project.init(root, title="nw-jobs demo")
    run = DemoRun(project, next_run_number(project, config), pipeline(speed), config)
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
        if plain:
            console.print(f"nw-jobs demo · run {run.run} · {project.root}", highlight=False)
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
        shutdown_runtimes(wait=True)
    jobs = run.rows()
    if plain:
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
    }
