import time

import renders  # noqa: F401  (importing it registers the film.* kinds)

import nw
from nw import jobs

project = nw.Project("my-film")

steps = {
    "storyboard": {
        "kind": "film.storyboard",
        "params": {
            "model": "sketch-xl",
            "operation": "storyboard",
            "scenes": ["dawn", "dusk"],
            "estimated_usd": 0.02,
        },
    },
    "cut": {"kind": "film.cut", "params": {"estimated_usd": 0.0}, "after": ["clip1", "clip2"]},
}
for n in (1, 2):
    steps[f"panel{n}"] = {
        "kind": "film.panel",
        "params": {"model": "flux", "operation": "text_to_image", "n": n, "estimated_usd": 0.04},
        "after": ["storyboard"],
    }
    steps[f"clip{n}"] = {
        "kind": "film.animate",
        "params": {
            "model": "kling",
            "operation": "image_to_video",
            "duration_s": 5,
            "n": n,
            "estimated_usd": 0.35,
        },
        "after": [f"panel{n}"],
    }

quote = jobs.estimate_pipeline(project, steps)  # nothing is enqueued
print(quote["estimated_usd"], quote["lower_bound"])

film = jobs.enqueue_pipeline(project, steps, label="my film", actor="ann")
print(film.created, [step.name for step in film.steps])

while not (film := jobs.get_pipeline(project, film.pipeline_id)).is_terminal:
    time.sleep(0.2)  # or leave: the workers and the store carry it to its end
print(film.status, film.pct, film.actual_usd, film.step("cut").job.result["clips"])

again = jobs.enqueue_pipeline(project, steps)  # the same steps: the same pipeline
print(again.pipeline_id == film.pipeline_id, again.created)
