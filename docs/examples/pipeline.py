import time

import renders  # noqa: F401  (importing it registers the film.* kinds)

import nw
from nw import jobs

project = nw.Project("my-film")


def wait_for(batch):
    """Poll until every job of the batch has ended; return them as they ended."""
    while True:
        batch = [jobs.get_job(project, job.job_id) for job in batch]
        if all(job.status in jobs.TERMINAL_STATUSES for job in batch):
            return batch
        time.sleep(0.2)


scenes = ["dawn", "the chase", "dusk"]
board = jobs.enqueue(
    project,
    "film.storyboard",
    {"model": "sketch-xl", "operation": "storyboard", "scenes": scenes, "estimated_usd": 0.02},
    label="storyboard",
)
[board] = wait_for([board])  # no dispatch=: a worker runs it

panels = jobs.enqueue_many(
    project,
    [
        {
            "kind": "film.panel",
            "params": {"model": "flux", "operation": "text_to_image", "prompt": prompt, "n": n},
            "label": f"panel {n}",
            "actor": "ann",
        }
        for n, prompt in enumerate(board.result["panels"], start=1)
    ],
)  # one transaction, one wake-up for the workers
panels = wait_for(panels)

jobs.set_limit(project, "fal:kling", max_running=2)  # at most 2 at once, on every worker
clips = jobs.enqueue_many(
    project,
    [
        {
            "kind": "film.animate",
            "params": {
                "model": "kling",
                "operation": "image_to_video",
                "duration_s": 5,
                "image": panel.artifact_ref,
                "n": n,
                "estimated_usd": 0.35,
            },
            "label": f"clip {n}",
            "actor": "ann",
        }
        for n, panel in enumerate(panels, start=1)
    ],
)
for clip in wait_for(clips):
    print(clip.label, clip.status, clip.result["artifact_ref"], clip.cost.actual_usd)
print(jobs.spend(project))
