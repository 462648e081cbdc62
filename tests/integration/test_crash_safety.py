"""kill -9 in the middle of writes never leaves half a record."""

from __future__ import annotations

import os

from nw import jobs
from tests.helpers import python_process, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_kill_9_while_writing_leaves_every_record_whole(project):
    script = f"""
        from nw import jobs
        def body(project, params, *, on_event):
            for i in range(50):
                on_event({{"stage_index": i, "stage_count": 50, "actual_usd": i / 100}})
            return {{"done": params["i"]}}
        i = 0
        while True:
            jobs.enqueue({str(project.root)!r}, "r", {{"i": i}}, dispatch={{"r": body}})
            i += 1
            if i == 20:
                print("writing", flush=True)
    """
    with python_process(script) as proc:
        assert proc.stdout.readline().strip() == "writing"
        wait_until(lambda: len(jobs.summarize(project, limit=500)) > 60, what="writes under way")
    listed = jobs.summarize(project, limit=10_000)
    assert len(listed) > 60
    seen = set()
    for job in listed:
        assert job.error is None or "unreadable" not in job.error
        assert job.kind == "r" and set(job.params) == {"i"}
        seen.add(job.params["i"])
        if job.status == jobs.SUCCEEDED:  # a whole terminal write: status, result, time
            assert job.result == {"done": job.params["i"]} and job.finished_at is not None
    assert seen == set(range(len(listed)))  # every enqueue either landed whole or not at all
