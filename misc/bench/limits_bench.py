"""Drain with a saturated key beside free keys, and claims per job (issue 14).
Prints; asserts nothing.

    PYTHONPATH=. python misc/bench/limits_bench.py [--url postgresql://…] [--free 400]

Four worker processes (8 slots each) drain, on the embedded store or on
PostgreSQL (``--url``):

* ``free only``: ``--free`` no-op jobs of a key without a limit;
* ``saturated + free``: first 40 jobs of key ``slow`` (0.2 s each,
  ``max_running=2``), queued ahead of the same free jobs.

Figures: the free jobs' drain rate (jobs over first start to last finish), the
saturated key's rate (2 slots of 0.2 s: 10 jobs/s at best) and the most of it
ever running (from the store's started/finished stamps), and claims per job:
every ``claim`` call of every worker (``claim_counter``) over the jobs run,
with the empty ones (a worker that spins on a blocked key would show many).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_bodies import start_workers, stop_workers  # noqa: E402


def run(base: Path, name: str, n_free: int, n_slow: int, url: str | None) -> dict:
    config = jobs.JobsConfig(database_url=url)
    project = nw.Project.init(base / name)
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM nw_jobs.limits WHERE limit_key IN ('slow', 'free')")
    jobs.set_limit(project, "slow", max_running=2, config=config)
    for i in range(n_slow):
        params = {"i": i, "key": "slow", "seconds": 0.2}
        jobs.enqueue(project, "bench.keyed", params, config=config)
    for i in range(n_free):
        params = {"i": i, "key": "free", "seconds": 0}
        jobs.enqueue(project, "bench.keyed", params, config=config)
    counts = base / f"{name}.claims"
    os.environ["NW_BENCH_CLAIMS"] = str(counts)
    extra = ["--max-concurrent", "8", "--import", "claim_counter"]
    if url:
        extra += ["--database-url", url]
    procs = start_workers(project, 4, extra)
    total = n_free + n_slow
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = jobs.list_jobs(project, status="succeeded", limit=10_000, config=config)
            if len(done) >= total:
                break
            time.sleep(0.2)
    finally:
        stop_workers(procs)
    rows = [(j.params["key"], j.started_at.timestamp(), j.finished_at.timestamp()) for j in done]
    calls = jobs_claimed = empty = 0
    for part in base.glob(f"{name}.claims.*"):
        c, n, e = map(int, part.read_text().split())
        calls, jobs_claimed, empty = calls + c, jobs_claimed + n, empty + e
    out = {"jobs": len(rows), "calls": calls, "claimed": jobs_claimed, "empty": empty}
    for key in ("free", "slow"):
        mine = [(s, f) for k, s, f in rows if k == key]
        if mine:
            span = max(f for _, f in mine) - min(s for s, _ in mine)
            events = sorted([(s, 1) for s, _ in mine] + [(f, -1) for _, f in mine])
            most = level = 0
            for _, step in events:
                level += step
                most = max(most, level)
            out[key] = (len(mine), span, most)
    if url:
        from nw.jobs.stores.postgres import PostgresJobStore

        PostgresJobStore(url, project.project_id).purge()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="PostgreSQL URL (default: the embedded store)")
    ap.add_argument("--free", type=int, default=400)
    args = ap.parse_args()
    store = "PostgreSQL" if args.url else "embedded SQLite"
    print(f"limits bench on {store}: 4 workers x 8 slots, key slow: max_running=2, 0.2 s jobs")
    print("scenario          | free jobs/s | slow jobs/s (most running) | claims/job | empty")
    with tempfile.TemporaryDirectory() as tmp:
        for name, n_slow in (("free only", 0), ("saturated + free", 40)):
            got = run(
                Path(tmp), name.replace(" ", "-").replace("+", "and"), args.free, n_slow, args.url
            )
            n, span, _ = got["free"]
            slow = "-"
            if "slow" in got:
                sn, sspan, most = got["slow"]
                slow = f"{sn / sspan:6.1f} ({most})"
            print(
                f"{name:<18}| {n / span:11.0f} | {slow:>26} | "
                f"{got['calls'] / got['jobs']:10.2f} | {got['empty']:5d}"
            )


if __name__ == "__main__":
    main()
