"""The render bodies of a small film pipeline, and the kinds that name them.

Only the work is simulated: each stage sleeps where a paid call to a model
would go. Import this module and its kinds are registered.
"""

import time

from nw import jobs


def _stages(names, seconds, *, on_event, should_cancel):
    """Report each stage as it starts; stop at a boundary when asked."""
    for i, name in enumerate(names):  # i = stages finished so far
        if should_cancel():
            raise jobs.JobCancelled(f"stopped before {name}")
        on_event({"stage_index": i, "stage_count": len(names), "current_transform": name})
        time.sleep(seconds)  # the paid call would go here


def storyboard(project, params, *, on_event, should_cancel):
    """Three scenes in, one panel prompt per scene out."""
    _stages(params["scenes"], 0.3, on_event=on_event, should_cancel=should_cancel)
    panels = [f"{scene}, wide shot, ink and wash" for scene in params["scenes"]]
    return {"cost_usd_actual": 0.02, "has_unknown_costs": False, "panels": panels}


def panel(project, params, *, on_event, should_cancel):
    """One still image for one panel prompt."""
    _stages(("compose", "render", "upscale"), 0.3, on_event=on_event, should_cancel=should_cancel)
    ref = f"img/panel-{params['n']}.png"
    return {"cost_usd_actual": 0.04, "has_unknown_costs": False, "artifact_ref": ref}


def animate(project, params, *, on_event, should_cancel):
    """A few seconds of video from one panel."""
    steps = ("upload", "generate", "interpolate", "download")
    _stages(steps, 0.5, on_event=on_event, should_cancel=should_cancel)
    ref = f"vid/panel-{params['n']}.mp4"
    return {"cost_usd_actual": 0.35, "has_unknown_costs": False, "artifact_ref": ref}


jobs.register_kind("film.storyboard", "renders:storyboard")
jobs.register_kind("film.panel", "renders:panel", retryable=True, max_attempts=3)
jobs.register_kind(
    "film.animate", "renders:animate", retryable=True, max_attempts=3, limit_key="fal:{model}"
)


def cut(project, params, *, inputs):
    """The clips in order, as one film: ``inputs`` are the results of the steps
    it comes after, by step name (a pipeline step's body may declare it)."""
    clips = [inputs[name]["artifact_ref"] for name in sorted(inputs)]
    return {"cost_usd_actual": 0.0, "artifact_ref": "vid/film.mp4", "clips": clips}


jobs.register_kind("film.cut", "renders:cut")
