"""Worker figures on the embedded store (issue 5). Prints; asserts nothing.

Drain: N no-op jobs queued first, then W worker processes; the rate is jobs
over the span from the first start to the last finish (process start-up is
not counted). Latency: one idle worker, jobs enqueued one at a time, each
waited for; enqueue-to-start is ``started_at - created_at`` of each record.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nw
from nw import jobs
from nw.jobs.stores import open_store

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from bench_bodies import start_workers, stop_workers  # noqa: E402  (registers bench.noop)


def finished_rows(project):
    store = open_store(project, jobs.DEFAULT_CONFIG, create=False)
    try:
        return [r.record for r in store.page(status="succeeded", limit=10_000)]
    finally:
        store.close()


def count_done(project):
    store = open_store(project, jobs.DEFAULT_CONFIG, create=False)
    try:
        return store._conn.execute(  # a bare count: the poll must not load the machine
            "SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL"
        ).fetchone()[0]
    finally:
        store.close()


def drain(base, n_jobs, n_workers, max_concurrent):
    project = nw.Project.init(base / f"drain-{n_workers}x{max_concurrent}")
    for i in range(n_jobs):
        jobs.enqueue(project, "bench.noop", {"i": i})
    procs = start_workers(project, n_workers, ["--max-concurrent", str(max_concurrent)])
    try:
        deadline = time.monotonic() + 300
        while count_done(project) < n_jobs and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop_workers(procs)
    rows = finished_rows(project)
    span = max(r["finished_at"] for r in rows) - min(r["started_at"] for r in rows)
    return len(rows), span


def latency(base, n):
    project = nw.Project.init(base / "latency")
    procs = start_workers(project, 1)
    try:
        time.sleep(1.0)  # let the worker boot and go idle (not a measurement)
        lat = []
        for i in range(n):
            job = jobs.enqueue(project, "bench.noop", {"i": i})
            while True:
                got = jobs.get_job(project, job.job_id)
                if got.is_terminal:
                    break
                time.sleep(0.0005)
            rec = open_store(project, jobs.DEFAULT_CONFIG, create=False)
            row = rec.get(job.job_id)
            rec.close()
            lat.append(row.record["started_at"] - row.record["created_at"])
            time.sleep(0.02)  # idle again before the next one
    finally:
        stop_workers(procs)
    return sorted(lat)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--max-concurrent", type=int, nargs="+", default=[8, 32])
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="nw-wbench-"))
    print(f"nw.jobs worker benchmark (embedded store), {os.cpu_count()} cores")
    for slots in args.max_concurrent:
        for n in (1, 2, 4):
            done, span = drain(base, args.jobs, n, slots)
            print(
                f"drain {done} no-op jobs, {n} worker(s) x {slots} slots: {done / span:.0f} jobs/s"
            )
    lat = latency(base, 200)
    p50, p99 = lat[len(lat) // 2], lat[min(int(len(lat) * 0.99), len(lat) - 1)]
    print(
        f"enqueue-to-start into an idle worker (200 jobs): p50 {p50 * 1000:.2f} ms, "
        f"p99 {p99 * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
