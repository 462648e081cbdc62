import time

import renders  # noqa: F401  (registers the film.* kinds; film.animate's key is "fal:{model}")

import nw
from nw import jobs

project = nw.Project.init("my-film")
jobs.set_limit(project, "fal:kling", max_running=2)  # 2 at once, on every worker
jobs.set_limit(project, "eleven:tts", per_second=10)  # 10 starts in any one second


def clip(n):
    return {"model": "kling", "operation": "image_to_video", "duration_s": 5, "n": n}


batch = jobs.enqueue_many(
    project,
    [
        {"kind": "film.animate", "params": clip(n), "actor": "batch", "label": f"batch {n}"}
        for n in range(1, 7)
    ],
)
preview = jobs.enqueue(
    project, "film.animate", clip(99), priority=5, actor="ana", label="preview"
)  # next to start, ahead of the batch's queued jobs
later = jobs.enqueue(
    project, "film.animate", clip(50), not_before=time.time() + 600, label="in ten minutes"
)
other = jobs.enqueue(
    project, "film.animate", clip(51), limit_key="fal:kling-b", label="other key"
)  # counts against its own key, which has no limit: starts at once

time.sleep(1)
for job in (preview, *batch, later, other):
    job = jobs.get_job(project, job.job_id)
    print(f"{job.label:14} {job.status:9} {job.waiting}")
for limit in jobs.list_limits(project):
    print(limit)

jobs.set_limit(project, "eleven:tts")  # neither cap: the limit is removed
for job in (preview, *batch, later, other):
    jobs.cancel_job(project, job.job_id)
