import time

from renders import animate

import nw
from nw import jobs

project = nw.Project("my-film")
job = jobs.enqueue(
    project,
    "film.animate",
    {"model": "kling", "operation": "image_to_video", "duration_s": 5, "n": 1},
    dispatch={"film.animate": animate},
)
while (jobs.get_job(project, job.job_id).progress.stage_index or 0) < 1:
    time.sleep(0.05)  # wait until "generate" has started

jobs.cancel_job(project, job.job_id)  # from this process or any other
while (job := jobs.get_job(project, job.job_id)).status not in jobs.TERMINAL_STATUSES:
    print(job.status)  # cancelling: the body stops at its next boundary
    time.sleep(0.2)
print(job.status, job.error_kind, job.error)
