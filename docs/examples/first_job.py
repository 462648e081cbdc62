import time

from renders import storyboard

import nw
from nw import jobs

project = nw.Project.init("my-film", title="My film")  # a folder; its jobs live in it
params = {
    "model": "sketch-xl",
    "operation": "storyboard",
    "scenes": ["dawn", "the chase", "dusk"],
    "estimated_usd": 0.02,
}

print(jobs.estimate(project, "film.storyboard", params))  # the cost gate, nothing written

job = jobs.enqueue(project, "film.storyboard", params, dispatch={"film.storyboard": storyboard})
print(job.job_id, job.status)  # returns at once: the body runs on this process's pool

while job.status not in jobs.TERMINAL_STATUSES:
    p = job.progress
    print(
        f"{job.status:8} {p.stage_index}/{p.stage_count} {p.current_transform} "
        f"pct={job.pct} eta_s={job.eta_s} ({job.confidence})"
    )
    time.sleep(0.25)
    job = jobs.get_job(project, job.job_id)

print(job.status, job.grade, job.cost.actual_usd, job.result["panels"])
