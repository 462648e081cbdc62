"""Kill-to-rerun: how long a killed worker's job waits (issue 12). Prints; asserts nothing.

Default configuration everywhere (the workers get no liveness flags; the
probe reads with ``JobsConfig()``). The probe polls ``summarize``, which is
read-only, so it never reaps and the figure is the workers' own doing.

Scenarios, each on the embedded store and (with a URL) on PostgreSQL:

* ``another worker alive``: two idle workers; the one running the job gets
  ``kill -9``; seconds until the job reads running again (attempt 2) for a
  retryable kind, or failed for a kind that is not.
* ``restarted on the same host``: one worker, ``kill -9``, a new worker
  started at once; seconds until the job runs again (worker start-up included).
* ``silent, no proof (as from another host)``: the worker is SIGSTOPped, so
  the kernel still shows it alive and only its beat going stale can tell:
  what a worker on another host gets.

Then the margin: the longest gap between a worker's beats (``runners.beat_at``)
while its slots run CPU-bound pure-Python bodies, i.e. how late a beat gets on
a loaded machine, against the 6 s after which a worker is judged dead.

    PYTHONPATH=. python misc/bench/orphan_bench.py [--database-url URL] [--runs 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nw
from nw import jobs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_bodies import start_workers, stop_workers  # noqa: E402  (registers bench.hold)


def _job(project, config, job_id):
    return next(j for j in jobs.summarize(project, config=config) if j.job_id == job_id)


def _wait(probe, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.01)
    raise RuntimeError(f"timed out waiting for {what}")


def _holder(procs, project, config, job_id):
    from nw.jobs.stores import open_store

    store = open_store(project, config, create=False)
    try:
        runner = store.get(job_id).record.get("runner_id") or ""
    finally:
        store.close()
    return next((p for p in procs if f":{p.pid}:" in runner), None)


def one_run(base, n, scenario, kind, config, flags):
    project = nw.Project.init(base / f"{scenario.split()[0]}-{kind}-{n}")
    others = 2 if scenario == "another worker alive" else 1
    if scenario.startswith("silent"):
        others = 2
    procs = start_workers(project, others, ["--max-concurrent", "1", *flags])
    try:
        job = jobs.enqueue(project, kind, {"seconds": 120, "n": n}, config=config)
        _wait(lambda: _job(project, config, job.job_id).status == "running", "the first run")
        victim = _wait(lambda: _holder(procs, project, config, job.job_id), "the holder")
        # The enqueue woke every worker at once, so their reaper ticks are in step
        # with it: kill at a random moment, or the figure would be luckier than a crash.
        time.sleep(random.uniform(0.0, 2.0))
        t0 = time.time()
        if scenario.startswith("silent"):
            victim.send_signal(signal.SIGSTOP)
        else:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
        if scenario == "restarted on the same host":
            procs += start_workers(project, 1, ["--max-concurrent", "1", *flags])

        def moved_on():
            j = _job(project, config, job.job_id)
            return (j.status == "running" and j.attempt == 2) or j.status == "failed"

        _wait(moved_on, "the job to move on")
        took = time.time() - t0
        ended = _job(project, config, job.job_id)
        if scenario.startswith("silent"):
            victim.send_signal(signal.SIGCONT)
        return took, ended.status
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
        stop_workers([p for p in procs if p.poll() is None])


def beat_gaps(base, config, flags, seconds=15.0, slots=3):
    """The largest gap between one worker's beats while ``slots`` spinning bodies run."""
    from nw.jobs.stores import open_store

    project = nw.Project.init(base / "beat-gaps")
    procs = start_workers(project, 1, ["--max-concurrent", str(slots), *flags])
    try:
        spun = [
            jobs.enqueue(project, "bench.spin", {"seconds": seconds, "n": n}, config=config)
            for n in range(slots)
        ]
        _wait(
            lambda: all(_job(project, config, j.job_id).status == "running" for j in spun),
            "the spinning bodies",
        )
        store = open_store(project, config, create=False)
        beats, deadline = [], time.monotonic() + seconds - 1
        try:
            while time.monotonic() < deadline:
                (runner,) = store.runners()
                if not beats or runner["beat_at"] != beats[-1]:
                    beats.append(runner["beat_at"])
                time.sleep(0.02)
        finally:
            store.close()
    finally:
        stop_workers(procs)
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    return max(gaps), statistics.median(gaps), len(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("NW_JOBS_DATABASE_URL"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    stores = [("sqlite", jobs.JobsConfig(), [])]
    if args.database_url:
        url = args.database_url
        stores.append(("postgres", jobs.JobsConfig(database_url=url), ["--database-url", url]))
    cases = [
        ("another worker alive", "bench.hold"),
        ("another worker alive", "bench.hold_once"),
        ("restarted on the same host", "bench.hold"),
        ("silent, no proof (as from another host)", "bench.hold"),
    ]
    print(f"kill-to-rerun, default JobsConfig, {args.runs} runs each (seconds)")
    print(f"{'store':9} | {'scenario':40} | {'kind':15} | {'outcome':8} | median |  max")
    with tempfile.TemporaryDirectory(prefix="nw-orphan-") as tmp:
        for store, config, flags in stores:
            for scenario, kind in cases:
                runs = [
                    one_run(Path(tmp) / store, n, scenario, kind, config, flags)
                    for n in range(args.runs)
                ]
                took = [t for t, _ in runs]
                outcome = "/".join(sorted({s for _, s in runs}))
                print(
                    f"{store:9} | {scenario:40} | {kind:15} | {outcome:8} |"
                    f" {statistics.median(took):6.2f} | {max(took):5.2f}"
                )
        print("\nbeat gaps of a worker running 3 CPU-bound bodies (worker_stale_s is 6 s)")
        for store, config, flags in stores:
            worst, median, n = beat_gaps(Path(tmp) / store, config, flags)
            print(f"{store:9} | {n} gaps | median {median:.2f} s | longest {worst:.2f} s")


if __name__ == "__main__":
    main()
