"""Core facade figures on the embedded store (issue 2). Prints; asserts nothing.

python misc/bench/core_bench.py            # full run (about a minute)
python misc/bench/core_bench.py --quick    # smaller sizes
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import nw
from nw import jobs
from nw.jobs.execution.runtimes import existing_runtime, shutdown_runtimes
from nw.jobs.stores import close_shared_stores, store_location

sys.path.insert(0, str(Path(__file__).parent))
import bench_bodies  # noqa: F401  (registers bench.noop)


def pct(values, q):
    values = sorted(values)
    return values[min(int(q / 100 * len(values)), len(values) - 1)]


def ms(seconds):
    return f"{seconds * 1000:.3f} ms"


def noop(project, params):
    return {"i": params["i"]}


def nap(project, params):
    time.sleep(0.05)  # a render that waits on its provider
    return {"i": params["i"]}


def fill(project, n, *, start=0):
    """n finished no-op jobs, run in process."""
    for i in range(start, start + n):
        jobs.enqueue(project, "noop", {"i": i}, dispatch={"noop": noop})
    rt = existing_runtime(store_location(project, jobs.DEFAULT_CONFIG))
    rt.wait_idle(timeout=600)


def timed(fn, repeat):
    """Seconds per call of ``fn(i)`` for i in range(repeat)."""
    out = []
    for i in range(repeat):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
    return out


def render_params(i):
    """What a real render's params look like to the ETA ladder (three keys)."""
    return {"i": i, "model": "flux-dev", "operation": "text_to_image", "duration_s": 5}


def disk_bytes(project):
    shutdown_runtimes()
    close_shared_stores()  # checkpoints the WAL into the database file
    folder = Path(project.root) / ".nw/jobs"
    apparent = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    blocks = sum(p.stat().st_blocks * 512 for p in folder.iterdir() if p.is_file())
    return apparent, blocks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = (100, 1000, 2000) if args.quick else (100, 1000, 5000)
    base = Path(tempfile.mkdtemp(prefix="nw-bench-"))
    print(f"nw.jobs core benchmark, {os.cpu_count()} cores, python {sys.version.split()[0]}")

    # enqueue call latency: queued for a worker (pure write path) and in-process
    p = nw.Project.init(base / "enqueue")
    t = timed(lambda i: jobs.enqueue(p, "bench.noop", render_params(i)), 1000)
    print(f"enqueue (queued for a worker)  p50 {ms(pct(t, 50))}  p99 {ms(pct(t, 99))}")
    p = nw.Project.init(base / "enqueue-inproc")
    t = timed(
        lambda i: jobs.enqueue(p, "noop", render_params(i), dispatch={"noop": noop}),
        1000,
    )
    print(
        f"enqueue (in-process, no-op bodies racing it on the store)  p50 {ms(pct(t, 50))}  "
        f"p99 {ms(pct(t, 99))}"
    )
    shutdown_runtimes()
    p = nw.Project.init(base / "enqueue-inproc-50ms")
    t = timed(
        lambda i: jobs.enqueue(p, "nap", render_params(i), dispatch={"nap": nap}),
        1000,
    )
    print(f"enqueue (in-process, 50 ms bodies)  p50 {ms(pct(t, 50))}  p99 {ms(pct(t, 99))}")
    shutdown_runtimes(wait=False)  # drop the ~990 still queued
    shutdown_runtimes()

    # end to end: 300 no-op jobs, enqueue to all finished, and the thread count
    p = nw.Project.init(base / "e2e")
    peak = [threading.active_count()]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], threading.active_count())
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    threads_before = threading.active_count()
    watcher.start()
    t0 = time.perf_counter()
    fill(p, 300)
    elapsed = time.perf_counter() - t0
    stop.set()
    watcher.join()
    print(f"end to end, 300 no-op jobs     {300 / elapsed:.0f} jobs/s ({elapsed:.2f} s)")
    added = peak[0] - threads_before - 1  # the watcher itself
    print(
        f"threads while running          {added} added (max_concurrent="
        f"{jobs.DEFAULT_CONFIG.max_concurrent} pool threads + 1 heartbeat)"
    )

    # get_job at 2,000 jobs
    p = nw.Project.init(base / "get")
    fill(p, 2000)
    some = [j.job_id for j in jobs.list_jobs(p, limit=500)]
    t = timed(lambda i: jobs.get_job(p, some[i % len(some)]), 2000)
    print(f"get_job at 2,000 jobs          p50 {ms(pct(t, 50))}  p99 {ms(pct(t, 99))}")
    apparent, blocks = disk_bytes(p)
    print(
        f"disk per job (2,000 finished)  {apparent / 2000 / 1024:.2f} kB apparent, "
        f"{blocks / 2000 / 1024:.2f} kB allocated"
    )

    # list_jobs(limit=50) as history grows
    p = nw.Project.init(base / "list")
    have, results = 0, {}
    for size in sizes:
        fill(p, size - have, start=have)
        have = size
        t = timed(lambda i: jobs.list_jobs(p, limit=50), 200)
        results[size] = pct(t, 50)
        print(f"list_jobs(limit=50) at {size:>5}  p50 {ms(results[size])}")
    growth = results[sizes[-1]] / results[sizes[0]]
    print(f"list_jobs growth {sizes[0]} -> {sizes[-1]} jobs: x{growth:.2f}")

    # summarize: a 200-job project, read-only, from a process with no handle on it
    p = nw.Project.init(base / "summary")
    fill(p, 200)
    shutdown_runtimes()
    close_shared_stores()
    t = timed(lambda i: jobs.summarize(p.root), 300)
    print(f"summarize (200-job project)    p50 {ms(pct(t, 50))}  p99 {ms(pct(t, 99))}")


if __name__ == "__main__":
    main()
