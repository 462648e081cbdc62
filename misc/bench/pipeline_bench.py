"""Pipelines (issue 36): what a dependent waits for, and what its release costs.
Prints; asserts nothing.

On the embedded store and (with a URL) on PostgreSQL:

* ``enqueue 1,000 steps``: a 1 -> 1,000 -> 1 pipeline of no-op steps enqueued
  (one ``create_many`` transaction: the jobs, the pipeline's row, its edges).
* ``release 1,000 dependents``: the root of that pipeline claimed and finished
  in this process with no worker running; the wall time of the finish that
  releases its 1,000 dependents, and the statements it took (SQLite: every
  statement the connection ran, BEGIN and COMMIT included; PostgreSQL: the
  client's statements, plus those the trigger runs inside it).
* ``cancel 1,002 steps``: another 1 -> 1,000 -> 1 pipeline, its root claimed
  (running, no worker), then ``cancel_pipeline``: its wall time (the running
  root flagged, the 1,001 waiting steps cancelled, the pipeline read back),
  and the statements it took on SQLite.
* ``fan-out/fan-in, 2 workers``: the same pipeline run to its end by two
  worker processes (4 slots each); wall time, and the fan-in's start after the
  last of its 1,000 upstreams finished.
* ``chain``: a chain of no-op steps run by two workers; per link, the time from
  the upstream's ``finished_at`` (its worker's clock when it decided the
  outcome, before the commit) to the dependent's ``started_at``: p50 and p90.
* ``in-process``: the same chain and a 1 -> ``width`` -> 1 fan with every step
  a ``dispatch=`` body of this process (4 pool threads, no worker): the
  dependent's start after its upstream's finish, and the fan's wall time.

    PYTHONPATH=. python misc/bench/pipeline_bench.py [--database-url URL]
        [--width 1000] [--chain 200] [--phases release,cancel,fan,chain,inproc]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nw
from nw import jobs
from nw.jobs import JobsConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_bodies import start_workers, stop_workers  # noqa: E402  (registers bench.noop)


def _wait(probe, what, timeout=300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def fan(width: int, tag: str) -> dict:
    steps = {"root": {"kind": "bench.noop", "params": {"i": "root", "tag": tag}}}
    for i in range(width):
        steps[f"s{i}"] = {"kind": "bench.noop", "params": {"i": i, "tag": tag}, "after": ["root"]}
    steps["join"] = {
        "kind": "bench.noop",
        "params": {"i": "join", "tag": tag},
        "after": [f"s{i}" for i in range(width)],
    }
    return steps


def chain(n: int, tag: str) -> dict:
    steps = {"c0": {"kind": "bench.noop", "params": {"i": 0, "tag": tag}}}
    for i in range(1, n):
        steps[f"c{i}"] = {
            "kind": "bench.noop",
            "params": {"i": i, "tag": tag},
            "after": [f"c{i - 1}"],
        }
    return steps


def _ended(project, config, pid, timeout=300.0):
    return _wait(
        lambda: (p := jobs.get_pipeline(project, pid, config=config)) and p.is_terminal and p,
        f"pipeline {pid}",
        timeout,
    )


def _root_claimed(project, config, width: int, tag: str):
    """A 1 -> ``width`` -> 1 pipeline enqueued (and how long that took), its
    root claimed here (running, no worker): ``(pipeline, store, root row, s)``."""
    from nw.jobs.stores import shared_store

    t0 = time.perf_counter()
    p = jobs.enqueue_pipeline(project, fan(width, tag), config=config)
    enq = time.perf_counter() - t0
    store = shared_store(nw.Project(project.root), config, create=True)
    (row,) = store.claim(["bench.noop"], now=time.time(), runner_id="bench", limit=1)
    assert row.record["step"] == "root"
    return p, store, row, enq


@contextlib.contextmanager
def _statements(store):
    """``[n]``: the statements the embedded store's connection runs meanwhile
    (None on PostgreSQL, whose trigger's statements a client cannot count)."""
    if not hasattr(store, "cursor"):
        yield [None]
        return
    count = [0]
    with store.cursor() as c:
        c.set_trace_callback(lambda _sql: count.__setitem__(0, count[0] + 1))
    try:
        yield count
    finally:
        with store.cursor() as c:
            c.set_trace_callback(None)


def release_cost(project, config, width: int) -> None:
    from au import ComputationStatus

    p, store, row, enq = _root_claimed(project, config, width, "release")
    print(f"  enqueue {width + 2} steps (one transaction): {enq * 1000:.0f} ms")
    with _statements(store) as count:
        t0 = time.perf_counter()
        store.finish(
            row.record["job_id"],
            au_status=ComputationStatus.COMPLETED,
            result={"i": "root"},
            error=None,
            fields={"finished_at": time.time()},
            attempt=row.record["attempt"],
        )
        took = time.perf_counter() - t0
    if count[0] is not None:
        how = f"{count[0]} statements (BEGIN and COMMIT included)"
    else:
        how = "1 client statement (the batch finish); its trigger runs 3 inside it"
    claimable = len(store.queue_ahead(limit=10 * width))  # queued for a worker's claim
    print(f"  release {width} dependents: {took * 1000:.0f} ms, {how}; {claimable} now claimable")
    jobs.cancel_pipeline(project, p.pipeline_id, config=config)


def cancel_cost(project, config, width: int) -> None:
    p, store, _root, _ = _root_claimed(project, config, width, "cancel")
    with _statements(store) as count:
        t0 = time.perf_counter()
        got = jobs.cancel_pipeline(project, p.pipeline_id, config=config)
        took = time.perf_counter() - t0
    how = ""
    if count[0] is not None:
        how = f", {count[0]} statements on the store's connection (reads included)"
    states = sorted({s.job.status.value for s in got.steps})
    print(f"  cancel {width + 2} steps (1 running): {took * 1000:.0f} ms{how}; steps now {states}")


def run_fan(project, config, width: int) -> None:
    url = ("--database-url", config.database_url) if config.database_url else ()
    procs = start_workers(project, 2, extra=("--max-concurrent", "4", *url))
    try:
        time.sleep(1.0)  # the workers announce themselves
        t0 = time.perf_counter()
        p = jobs.enqueue_pipeline(project, fan(width, "run"), config=config)
        done = _ended(project, config, p.pipeline_id)
        wall = time.perf_counter() - t0
    finally:
        stop_workers(procs)
    join = done.step("join").job
    last = max(s.job.finished_at for s in done.steps if s.name.startswith("s"))
    print(
        f"  1 -> {width} -> 1, 2 workers: {done.status} in {wall:.1f} s;"
        f" the fan-in started {(join.started_at - last).total_seconds() * 1000:.1f} ms"
        " after its last upstream finished"
    )


def _start_gaps(done) -> str:
    """A chain's time from each upstream's finish to its dependent's start."""
    gaps = [
        (b.job.started_at - a.job.finished_at).total_seconds() * 1000
        for a, b in zip(done.steps, done.steps[1:], strict=False)
    ]
    q = statistics.quantiles(gaps, n=10)
    return (
        f"upstream finished -> dependent started: p50 {statistics.median(gaps):.1f} ms,"
        f" p90 {q[8]:.1f} ms, max {max(gaps):.1f} ms"
    )


def run_chain(project, config, n: int) -> None:
    url = ("--database-url", config.database_url) if config.database_url else ()
    procs = start_workers(project, 2, extra=("--max-concurrent", "4", *url))
    try:
        time.sleep(1.0)
        t0 = time.perf_counter()
        p = jobs.enqueue_pipeline(project, chain(n, "chain"), config=config)
        done = _ended(project, config, p.pipeline_id)
        wall = time.perf_counter() - t0
    finally:
        stop_workers(procs)
    print(f"  chain of {n}, 2 workers: {wall:.1f} s; {_start_gaps(done)}")


def _noop(project, params):
    return {"i": params.get("i")}


def run_inproc(project, config, n: int, width: int) -> None:
    import dataclasses

    config = dataclasses.replace(config, max_concurrent=4)
    here = {"bench.noop": _noop}
    t0 = time.perf_counter()
    p = jobs.enqueue_pipeline(project, chain(n, "here"), dispatch=here, config=config)
    done = _ended(project, config, p.pipeline_id)
    wall = time.perf_counter() - t0
    print(f"  in-process chain of {n}: {done.status} in {wall:.1f} s; {_start_gaps(done)}")
    t0 = time.perf_counter()
    p = jobs.enqueue_pipeline(project, fan(width, "here"), dispatch=here, config=config)
    done = _ended(project, config, p.pipeline_id)
    wall = time.perf_counter() - t0
    print(f"  in-process 1 -> {width} -> 1, 4 threads: {done.status} in {wall:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--database-url")
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--chain", type=int, default=200)
    ap.add_argument("--only", choices=("sqlite", "postgres"))
    ap.add_argument("--phases", default="release,cancel,fan,chain,inproc")
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    backends = [("sqlite", None)] + ([("postgres", args.database_url)] if args.database_url else [])
    for name, url in backends:
        if args.only not in (None, name):
            continue
        print(name, flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            for what in args.phases.split(","):
                project = nw.Project.init(Path(tmp) / what, title=f"pipeline bench {what}")
                config = JobsConfig(database_url=url)
                try:
                    if what == "release":
                        release_cost(project, config, args.width)
                    elif what == "cancel":
                        cancel_cost(project, config, args.width)
                    elif what == "fan":
                        run_fan(project, config, args.width)
                    elif what == "inproc":
                        run_inproc(project, config, args.chain, args.width)
                    else:
                        run_chain(project, config, args.chain)
                finally:
                    if url:
                        from nw.jobs.stores.postgres import PostgresJobStore

                        PostgresJobStore(url, project.read_meta()["project_id"]).purge()


if __name__ == "__main__":
    main()
