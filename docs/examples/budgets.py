import renders  # noqa: F401  (registers the film.* kinds)

import nw
from nw import jobs

project = nw.Project.init("budget-film")  # a fresh project: nothing spent yet
config = jobs.JobsConfig(budget_usd=5.00, actor_budget_usd=0.50)  # pass it to every call
clip = {"model": "kling", "operation": "image_to_video", "duration_s": 5, "n": 1}

print(jobs.estimate(project, "film.animate", {**clip, "estimated_usd": 0.35}, config=config))
jobs.enqueue(project, "film.animate", {**clip, "estimated_usd": 0.35}, actor="ann", config=config)
try:  # ann has $0.35 of her $0.50 committed: another $0.35 clip does not fit
    jobs.enqueue(
        project, "film.animate", {**clip, "n": 2, "estimated_usd": 0.35}, actor="ann", config=config
    )
except jobs.BudgetExceeded as exc:
    print(exc)  # nothing was written

# A job whose cost is unknown (no estimate) needs approval under a cap.
try:
    jobs.enqueue(project, "film.animate", {**clip, "n": 3}, actor="bo", config=config)
except jobs.BudgetExceeded as exc:
    print(exc.needs_approval, exc)
jobs.enqueue(project, "film.animate", {**clip, "n": 3}, actor="bo", approved=True, config=config)

print(jobs.spend(project, config=config))  # committed: spent plus live estimates
print(jobs.spend(project, actor="ann", config=config))
