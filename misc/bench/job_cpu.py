"""A PostgreSQL worker's Python CPU per job, its two halves measured apart. Prints; asserts nothing.

    python misc/bench/job_cpu.py [--url postgresql://…] [--rounds 300] [--profile]

A drain's rate moves with the machine by tens of percent, so a change to
the worker's own per-job work shows better as CPU, counted on one thread,
in process, without the other threads' contention for the interpreter:

* ``attempt``: ``body.run_attempt`` of the no-op body (``bench.noop``) on a
  claimed job, as a body's pool thread runs it, up to handing its finish to
  the store's group commit (answered at once here: the statement is the
  other half);
* ``statement``: the committer's ``finish_many_and_claim`` of ten finishes
  (built as a body builds them) and the ten claims in their slots, from the
  batch's parameters to the claimed rows decoded (the server's time is
  wall time, not counted);
* ``launch``: ``Worker._launch`` of a claimed row (its ``Launch``, the
  runtime's hold, the pool's hand-off), as the committer does for each job a
  statement claimed (the pool's thread is not started: no body runs).

Each on a scratch database created and dropped here. ``--profile`` adds
cProfile's top entries (by own time) for each half.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]
URL = os.environ.get("NW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

import bench_bodies  # noqa: E402,F401  (registers bench.noop)
from au import ComputationStatus  # noqa: E402
from bench_bodies import scratch_database  # noqa: E402

import nw  # noqa: E402
from nw import jobs  # noqa: E402
from nw.jobs.core import kinds, outcome  # noqa: E402
from nw.jobs.execution.body import Launch, run_attempt  # noqa: E402
from nw.jobs.stores import open_store  # noqa: E402
from nw.jobs.stores.roles import Refill  # noqa: E402

RUNNER = "bench:1:cpu"


def _answered() -> Future:
    done: Future = Future()
    done.set_running_or_notify_cancel()
    done.set_result(True)
    return done


def per_job(fn, jobs_done) -> float:
    """``fn()`` once; its thread's CPU per job in µs (``jobs_done()`` after it)."""
    start = time.thread_time()
    fn()
    return 1e6 * (time.thread_time() - start) / max(jobs_done(), 1)


def profiled(fn, top: int) -> None:
    prof = cProfile.Profile(time.thread_time)
    prof.runcall(fn)
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def attempt_half(project, config, rounds: int, profile: bool) -> float:
    n = 100
    jobs.enqueue_many(project, [("bench.noop", {"i": i}) for i in range(n)], config=config)
    store = open_store(project, config, create=True)
    rows = store.claim(["bench.noop"], now=config.clock(), runner_id=RUNNER, limit=n)
    # the finish built as the store builds it, answered at once (the statement
    # is the other half)
    store.finish_soon = lambda job_id, **finish: (
        store._finish_item(job_id, **finish),
        _answered(),
    )[1]
    spec = kinds.kind_spec("bench.noop")
    fn, stopping = spec.load(), threading.Event()

    def run(times: int) -> None:
        for _ in range(times):
            for row in rows:
                launch = Launch(fn=fn, project=project, stopping=stopping, timeout_s=spec.timeout_s,
                                cancel_on_timeout=spec.cancel_on_timeout)  # fmt: skip
                run_attempt(store, row, launch, config, hand_over=True)

    run(1)  # warm
    times = max(rounds // 30, 2)
    got = per_job(lambda: run(times), lambda: times * len(rows))
    if profile:
        profiled(lambda: run(2), 40)
    return got


def statement_half(project, config, rounds: int, profile: bool) -> float:
    n = 10 * (rounds + 4 + (30 if profile else 0))  # every round's claim finds ten
    for start in range(0, n, 1000):
        items = [("bench.noop", {"i": i}) for i in range(start, min(start + 1000, n))]
        jobs.enqueue_many(project, items, config=config)
    store = open_store(project, config, create=True)
    taken: list = []
    store.refill = Refill(kinds=lambda: ["bench.noop"], runner_id=RUNNER,
                          want=lambda _ids: 10, take=lambda rows, _n: taken.append(rows),
                          clock=config.clock)  # fmt: skip
    held = [store.claim(["bench.noop"], now=config.clock(), runner_id=RUNNER, limit=10)]
    spent = [0.0, 0]  # CPU of the statements alone, the jobs they finished

    def build() -> list:
        """The finishes of the held jobs, as bodies build them (on their own
        threads in a worker: not counted here)."""
        rows, now = held[-1], config.clock()
        out = []
        for row in rows:
            fields = {"finished_at": now, "error": None,
                      **outcome.closed_attempts(row.record, ended="succeeded", at=now,
                                                error=None)}  # fmt: skip
            out.append(store._finish_item(row.record["job_id"],
                                          au_status=ComputationStatus.COMPLETED,
                                          result={"i": 0}, error=None, fields=fields,
                                          attempt=row.record["attempt"]))  # fmt: skip
        return out

    def run(times: int) -> None:
        for _ in range(times):
            batch = build()
            start = time.thread_time()
            store._finish_many(batch)
            spent[0] += time.thread_time() - start
            spent[1] += len(batch)
            held.append(taken.pop())

    run(3)  # warm: prepared on this connection
    spent[:] = [0.0, 0]
    run(rounds)
    got = 1e6 * spent[0] / max(spent[1], 1)
    if profile:
        profiled(lambda: run(min(rounds // 3, 30)), 25)
    return got


def launch_half(project, config, rounds: int, profile: bool) -> float:
    from nw.jobs.execution.worker import Worker

    n = 100
    jobs.enqueue_many(project, [("bench.noop", {"i": i}) for i in range(n)], config=config)
    worker = Worker([project], config=config)
    rt = worker.runtimes[0]
    rows = rt.store.claim(["bench.noop"], now=config.clock(), runner_id=RUNNER, limit=n)
    ran: list = []
    rt.backend.launch = lambda *a, **k: ran.append(a)  # handed to the pool: not run
    rt._ensure_beater = lambda: None

    def run(times: int) -> None:
        for _ in range(times):
            for row in rows:
                worker._launch(rt, row)
            worker._launches.clear()
            worker._started.clear()
            rt._launches.clear()
            ran.clear()

    try:
        run(1)
        times = max(rounds // 10, 2)
        got = per_job(lambda: run(times), lambda: times * len(rows))
        if profile:
            profiled(lambda: run(5), 15)
    finally:
        worker.stopping.set()
        worker._reaping.close()
        for r in worker.runtimes:
            r.close(wait=False)
        worker._listener.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=URL, help="a server where a scratch database may be created")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    with scratch_database(args.url, "nw_cpu") as url:
        config = jobs.JobsConfig(database_url=url)
        out = {}
        try:
            for name, half in (("attempt", attempt_half), ("statement", statement_half),
                               ("launch", launch_half)):  # fmt: skip
                project = nw.Project.init(Path(tempfile.mkdtemp()) / f"cpu-{name}")
                out[name] = half(project, config, args.rounds, args.profile)
                print(f"{name:>9}: {out[name]:6.1f} µs of CPU per job", flush=True)
            print(f"{'sum':>9}: {sum(out.values()):6.1f} µs of CPU per job")
        finally:
            from nw.jobs.stores import close_shared_stores
            from nw.jobs.stores.postgres import close_pools

            close_shared_stores()
            close_pools()


if __name__ == "__main__":
    main()
