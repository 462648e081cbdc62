"""CPU per job of pgqueuer's worker and of PostgreSQL, counted as ``pg_bench.py``'s
drain counts ours (issue 13). Prints; asserts nothing.

    cd ../shared/bench && "$V/bin/python" ../../main/misc/bench/peer_cpu.py \
        [--jobs 4000] [--workers 1 2] [--driver asyncpg psycopg matched capped] [--url postgresql://…/postgres]

Run with the shared harness's environment (``$V`` in ``../shared/bench/README.md``:
pgqueuer, asyncpg) from that folder: it uses the harness's pgqueuer peers (their
worker command, enqueue and install) unchanged. Per run: a scratch database
``peer_cpu`` (dropped and created), ``--jobs`` no-op jobs enqueued in batches of
1,000, then ``--workers`` worker processes at concurrency 10 drain them; the CPU
of the workers (``/proc``, every thread) and of the PostgreSQL server on this host
(its processes, and its exited backends through the postmaster) from the first
finish seen to the last, over the jobs finished between.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_bodies import cpu_seconds, server_cpu_seconds  # noqa: E402

DB = "peer_cpu"


def enqueue_noops(peer, dsn: str, n_jobs: int) -> None:
    """``n_jobs`` no-op jobs through a harness peer's producer, 1,000 at a time."""

    async def enqueue() -> None:
        async with peer.producer(dsn) as p:
            for start in range(0, n_jobs, 1000):
                await p.enqueue_noops(min(1000, n_jobs - start))

    asyncio.run(enqueue())


def drain(peers, driver: str, base: str, n_jobs: int, n_workers: int) -> str:
    if driver == "matched":  # over asyncpg, with nw-jobs' guarantees
        from peer_pgq_matched import Matched as peer_class
    elif driver == "capped":  # over asyncpg, at most 10 jobs held (the drain goal's peer)
        from peer_pgq_matched import Capped as peer_class
    else:
        peer_class = {"asyncpg": peers.PgQueuerAsyncpgPeer, "psycopg": peers.PgQueuerPeer}[driver]
    peer = peer_class()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB}")
        conn.execute(f"CREATE DATABASE {DB}")
    dsn = base.rsplit("/", 1)[0] + "/" + DB
    env = {**os.environ, "WORKER_PEERS_DSN": dsn}
    peer.install(dsn, env)
    enqueue_noops(peer, dsn, n_jobs)
    procs = [
        subprocess.Popen(
            peer.worker_argv(10),
            env=env,
            cwd=Path(peers.__file__).parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(n_workers)
    ]
    workers = [p.pid for p in procs]
    try:
        with psycopg.connect(dsn, autocommit=True) as watch:
            done, first, deadline = 0, None, time.monotonic() + 300
            while done < n_jobs and time.monotonic() < deadline:
                time.sleep(0.05)
                done = watch.execute(peer.finished_sql).fetchone()[0]
                if done and first is None:
                    first = (done, cpu_seconds(workers), server_cpu_seconds(), time.monotonic())
            last = (done, cpu_seconds(workers), server_cpu_seconds(), time.monotonic())
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
    if first is None or last[0] <= first[0] or None in (*first[1:3], *last[1:3]):
        return f"pgqueuer-{driver}, {n_workers} worker(s): no CPU figure (nothing finished?)"
    n = last[0] - first[0]
    return (
        f"pgqueuer-{driver}, {n_workers} worker(s) x 10: {n / (last[3] - first[3]):,.0f} jobs/s"
        f" (between polls); CPU per job workers {1000 * (last[1] - first[1]) / n:.2f} ms,"
        f" PostgreSQL {1000 * (last[2] - first[2]) / n:.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--driver",
        nargs="+",
        default=["asyncpg", "psycopg"],
        choices=["asyncpg", "psycopg", "matched", "capped"],
        help="matched: over asyncpg, with nw-jobs' guarantees; capped: at most 10 jobs held"
        " (both peer_pgq_matched.py)",
    )
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())  # the shared harness, run from its folder
    import worker_peers as peers

    for driver in args.driver:
        for n in args.workers:
            print(drain(peers, driver, args.url, args.jobs, n), flush=True)
    with psycopg.connect(args.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB}")


if __name__ == "__main__":
    main()
