"""A parked provider job, in this process: submit, let the slot go, resume by poll."""

import time
import uuid

import nw
from nw import jobs


class Acme:
    """A stand-in for a provider's queue (your provider's client goes here)."""

    def __init__(self, seconds):
        self.seconds, self.requests, self.cancelled = seconds, {}, []

    def submit(self, prompt):
        request_id = uuid.uuid4().hex
        self.requests[request_id] = (time.time(), prompt)
        return request_id

    def status(self, request_id):
        """(the video's URL or None, the request's place in the queue: 0 is running)."""
        started, prompt = self.requests[request_id]
        left = started + self.seconds - time.time()
        if left <= 0:
            return f"https://acme/{prompt}.mp4", 0
        return None, 1 if left > self.seconds / 2 else 0


acme = Acme(seconds=2.5)


def render(project, params, *, resume=None):
    if resume:  # a retry: the provider still has the request, so do not pay again
        return jobs.Submitted(resume["request_id"], provider="acme")
    return jobs.Submitted(acme.submit(params["prompt"]), provider="acme", deadline_s=600)


def poll(project, params, request_id):
    url, queued = acme.status(request_id)
    if url is None:
        return jobs.Pending(position=queued)  # still working: asked again later
    return {"video": url, "cost_usd_actual": 0.12}


def cancel_remote(project, params, request_id):
    acme.cancelled.append(request_id)


jobs.register_kind("acme.render", render, poll=poll, cancel_remote=cancel_remote)

project = nw.Project.init("my-film")
job = jobs.enqueue(project, "acme.render", {"prompt": "heron"}, dispatch={"acme.render": render})
said = set()
for seen in jobs.watch(project, job.job_id, timeout=30):  # each change until it ends
    if seen.parked and seen.waiting not in said:  # its slot is free meanwhile
        said.add(seen.waiting)
        print(seen.status, "|", seen.waiting)
print(seen.status, seen.result["video"], seen.cost.actual_usd)
