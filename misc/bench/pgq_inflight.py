"""How many jobs a pgqueuer worker holds at once, by how it is run. Prints only.

    cd ../shared/bench && "$V/bin/python" ../../main/misc/bench/pgq_inflight.py \\
        [--dsn postgresql://…/test] [--jobs 4000] [--concurrency 10] [--rounds 2]

Run with the shared harness's environment (``$V`` in ``../shared/bench/README.md``:
pgqueuer, asyncpg) from that folder, as ``peer_cpu.py``.

For each of the harness's ``pgqueuer-asyncpg`` peer and this folder's
``peer_pgq_matched`` peers (``Capped``, ``Matched``): a scratch database,
pgqueuer's schema, N no-op jobs enqueued in batches, then one worker process
started as the harness starts it, while this process samples, as fast as one
connection can, how many of the queue's rows are ``picked`` (claimed, their
acknowledgement not yet written). It prints the largest and the median count
seen and the drain rate from the worker's first claim to the last
acknowledgement (pgqueuer's own log). The harness compares peers "at
concurrency C"; this says what C bounds for each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, os.getcwd())  # the shared harness, run from its folder
from peer_cpu import enqueue_noops
from peer_pgq_matched import Capped, Matched
from worker_peers import HERE, PgQueuerAsyncpgPeer

PICKED = "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
LEFT = "SELECT count(*) FROM pgqueuer"


def measure(peer, admin: str, jobs: int, concurrency: int) -> None:
    base, _, _ = admin.rpartition("/")
    db = f"pgq_inflight_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute(f"CREATE DATABASE {db}")
    dsn = f"{base}/{db}"
    env = {**os.environ, "WORKER_PEERS_DSN": dsn, "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    worker = None
    try:
        peer.install(dsn, env)
        enqueue_noops(peer, dsn, jobs)
        argv = peer.worker_argv(concurrency)
        worker = subprocess.Popen(
            argv, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        seen: list[int] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                picked = conn.execute(PICKED).fetchone()[0]
                if picked or seen:
                    seen.append(picked)
                if seen and not conn.execute(LEFT).fetchone()[0]:
                    break
            first, last, done = conn.execute(
                "SELECT min(created) FILTER (WHERE status = 'picked'),"
                " max(created) FILTER (WHERE status = 'successful'),"
                " count(*) FILTER (WHERE status = 'successful') FROM pgqueuer_log"
            ).fetchone()
        span = (last - first).total_seconds()
        print(
            f"{peer.name:>17}: {done} jobs, picked at once: max {max(seen)},"
            f" median {statistics.median(seen):.0f} ({len(seen)} samples);"
            f" {done / span:,.0f} jobs/s from first claim to last acknowledgement",
            flush=True,
        )
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        with psycopg.connect(admin, autocommit=True) as a:
            a.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"pgqueuer, one worker, concurrency {args.concurrency}, {args.jobs} no-op jobs")
    for _ in range(args.rounds):
        for peer in (PgQueuerAsyncpgPeer(), Capped(), Matched()):
            measure(peer, args.dsn, args.jobs, args.concurrency)


if __name__ == "__main__":
    sys.exit(main())
