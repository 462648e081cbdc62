"""PostgreSQL backend figures (issue 6). Prints; asserts nothing.

    python misc/bench/pg_bench.py [--url postgresql://…] [--quick] [--only NAME ...]

Figures, all in one run so they share the machine's state:

* ceiling: the database's own single-row ``SKIP LOCKED`` claim-update rate,
  measured with ``pgbench`` (4 clients) on a bare queue table;
* list_jobs at 100 / 10,000 / 100,000 jobs of history (rows bulk-inserted by
  SQL; every project shares the one database, so the big histories are also
  other projects' noise);
* enqueue: the facade's ``enqueue`` of claimable jobs, 1 and 4 threads, and
  ``enqueue_many`` in batches of 1,000;
* drain: 2,000 pre-enqueued no-op jobs, 1 / 2 / 4 worker processes (the span
  from the first start to the last finish, as ``worker_bench.py``);
* enqueue-to-start into an idle worker (woken by LISTEN/NOTIFY), p50 / p99;
* round trips (and statements) per job of one worker, counted on the wire
  (``wire_count.py``): a burst of 500 and a trickle of 50, one every 20 ms.

Benchmark rows live under projects named ``bench-…`` and are deleted after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

import nw
from nw import jobs
from nw.jobs.execution.runtimes import shutdown_runtimes
from nw.jobs.stores import close_shared_stores
from nw.jobs.stores.postgres import PostgresJobStore, migrate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from bench_bodies import cpu_seconds, server_cpu_seconds, start_workers, stop_workers  # noqa: E402  (registers bench.noop)

URL = os.environ.get("NW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pct(values, q):
    values = sorted(values)
    return values[min(int(q / 100 * len(values)), len(values) - 1)]


def new_project(base: Path, name: str) -> nw.Project:
    return nw.Project.init(base / f"{name}-{uuid.uuid4().hex[:6]}")


def purge(project: nw.Project) -> None:
    PostgresJobStore(URL, project.project_id).purge()


# ----- the database's own ceiling ------------------------------------------------------
PGBENCH_SCRIPT = """\
UPDATE nw_bench_queue SET state = 'running', taken_at = now()
 WHERE id = (SELECT id FROM nw_bench_queue WHERE state = 'queued'
             ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED);
"""


def ceiling(seconds: int, clients: int = 4) -> float | None:
    if shutil.which("pgbench") is None:
        print("ceiling: pgbench not found (apt-get install postgresql-contrib)")
        return None
    rows = 12_000 * seconds + 50_000
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS nw_bench_queue")
        conn.execute(
            "CREATE TABLE nw_bench_queue (id bigserial PRIMARY KEY, state text NOT NULL,"
            " payload jsonb, taken_at timestamptz)"
        )
        conn.execute(
            "INSERT INTO nw_bench_queue (state, payload)"
            " SELECT 'queued', '{\"i\": 1}' FROM generate_series(1, %s)",
            (rows,),
        )
        conn.execute("CREATE INDEX nw_bench_queued ON nw_bench_queue (id) WHERE state = 'queued'")
        conn.execute("VACUUM ANALYZE nw_bench_queue")
    script = Path(tempfile.mkdtemp()) / "claim.sql"
    script.write_text(PGBENCH_SCRIPT)
    try:
        out = subprocess.run(
            [
                "pgbench",
                "-n",
                "-c",
                str(clients),
                "-j",
                "2",
                "-T",
                str(seconds),
                "-f",
                str(script),
                URL,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS nw_bench_queue")
    tps = [ln for ln in out.splitlines() if ln.startswith("tps")]
    value = float(tps[0].split("=")[1].split()[0])
    print(
        f"ceiling: pgbench single-row SKIP LOCKED claim-update, {clients} clients, "
        f"{seconds} s: {value:,.0f} claims/s"
    )
    return value


# ----- list_jobs over history -----------------------------------------------------------
FILL = """
WITH g AS (
  SELECT i, %(t0)s + i * 0.5 AS at,
         lpad(to_hex(i), 16, '0') || md5(%(p)s || i::text) || md5(i::text || %(p)s) AS job_id,
         CASE WHEN i %% 50 = 0 THEN 'failed' WHEN i %% 97 = 0 THEN 'cancelled'
              ELSE 'completed' END AS au
  FROM generate_series(1, %(n)s) AS i
)
INSERT INTO nw_jobs.jobs (project_id, job_id, created_at, kind, idempotency_key, actor_id,
  au_status, attempt, cancel_requested, started_at, finished_at, heartbeat_at, runner_id, doc,
  au_value, au_completed_at)
  SELECT %(p)s, job_id, at, 'image.render', md5(job_id),
         CASE WHEN i %% 10 = 0 THEN 'u' || (i %% 7) END,
         au, 1, au = 'cancelled', at + 0.1, at + 2.0, at + 1.9, 'bench-runner',
         jsonb_build_object('label', 'render ' || i, 'params', jsonb_build_object('i', i,
           'prompt', 'a cat in a hat, number ' || i), 'run_id', md5(job_id || 'r'),
           'max_attempts', 1, 'runner', 'worker', 'estimated_usd', 0.04, 'actual_usd', 0.04,
           'eta_candidates', jsonb_build_array('m|render'), 'output_kind', 'image',
           'eta_p50', 12.0, 'eta_p90', 18.0, 'eta_confidence', 'learned'),
         CASE WHEN au = 'completed' THEN jsonb_build_object('i', i) END, to_timestamp(at + 2.0)
  FROM g
"""


def list_jobs_over_history(base: Path, sizes) -> None:
    cfg = jobs.JobsConfig(database_url=URL)
    for n in sizes:
        project = new_project(base, f"bench-list-{n}")
        try:
            t = time.perf_counter()
            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute(FILL, {"p": project.project_id, "n": n, "t0": 1.7e9})
                conn.execute("ANALYZE nw_jobs.jobs")
            fill_s = time.perf_counter() - t
            jobs.list_jobs(project, config=cfg)  # warm the pool and prepared statements
            results = {}
            for label, kw in (
                ("newest 50", {}),
                ("status=failed", {"status": "failed"}),
                ("actor", {"actor": "u3"}),
            ):
                times = []
                for _ in range(30):
                    t = time.perf_counter()
                    got = jobs.list_jobs(project, limit=50, config=cfg, **kw)
                    times.append(time.perf_counter() - t)
                assert got, label
                results[label] = statistics.median(times)
            t = time.perf_counter()
            for _ in range(10):
                jobs.summarize(project, limit=50, config=cfg)
            summ = (time.perf_counter() - t) / 10
            shown = ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in results.items())
            print(
                f"list_jobs at {n:>7,} jobs (filled in {fill_s:.1f} s): {shown};"
                f" summarize {summ * 1000:.2f} ms"
            )
        finally:
            close_shared_stores()
            purge(project)


# ----- enqueue ------------------------------------------------------------------------------
def enqueue_rate(base: Path, n: int) -> None:
    cfg = jobs.JobsConfig(database_url=URL)
    for threads in (1, 4):
        project = new_project(base, f"bench-enqueue-{threads}")
        try:
            jobs.enqueue(project, "bench.noop", {"i": -1}, config=cfg)  # warm up
            per = n // threads

            def work(k, project=project, per=per):
                for i in range(per):
                    jobs.enqueue(project, "bench.noop", {"i": i, "t": k}, config=cfg)

            pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
            t = time.perf_counter()
            for th in pool:
                th.start()
            for th in pool:
                th.join()
            span = time.perf_counter() - t
            print(
                f"enqueue {per * threads} claimable jobs, {threads} thread(s): "
                f"{per * threads / span:,.0f} jobs/s ({span / (per * threads) * 1e3:.2f} ms"
                " per call per thread)"
                if threads == 1
                else f"enqueue {per * threads} claimable jobs, {threads} thread(s): "
                f"{per * threads / span:,.0f} jobs/s"
            )
        finally:
            close_shared_stores()
            purge(project)
    project = new_project(base, "bench-enqueue-batch")
    try:
        jobs.enqueue_many(project, [("bench.noop", {"i": -1})], config=cfg)  # warm up
        t = time.perf_counter()
        for start in range(0, n, 1000):
            batch = [("bench.noop", {"i": i}) for i in range(start, min(start + 1000, n))]
            jobs.enqueue_many(project, batch, config=cfg)
        span = time.perf_counter() - t
        print(f"enqueue_many {n} claimable jobs in batches of 1000: {n / span:,.0f} jobs/s")
    finally:
        close_shared_stores()
        purge(project)


# ----- workers -------------------------------------------------------------------------------


def count_done(project, conn: psycopg.Connection | None = None) -> int:
    if conn is None:
        with psycopg.connect(URL) as own:
            return count_done(project, own)
    return conn.execute(
        "SELECT count(*) FROM nw_jobs.jobs WHERE project_id = %s AND finished_at IS NOT NULL",
        (project.project_id,),
    ).fetchone()[0]


def drain(base: Path, n_jobs: int, n_workers: int, max_concurrent: int) -> None:
    cfg = jobs.JobsConfig(database_url=URL)
    project = new_project(base, f"bench-drain-{n_workers}x{max_concurrent}")
    try:
        for start in range(0, n_jobs, 1000):
            batch = [("bench.noop", {"i": i}) for i in range(start, min(start + 1000, n_jobs))]
            jobs.enqueue_many(project, batch, config=cfg)
        procs = start_workers(
            project, n_workers, ["--database-url", URL, "--max-concurrent", str(max_concurrent)]
        )
        workers = [p.pid for p in procs]
        try:
            with psycopg.connect(URL, autocommit=True) as watch:  # one: connecting costs CPU
                deadline = time.monotonic() + 300
                done, at_first = 0, None
                while done < n_jobs and time.monotonic() < deadline:
                    time.sleep(0.05)
                    done = count_done(project, watch)
                    # CPU from the first finish seen to the last: the drain, not the boot
                    if done and at_first is None:
                        at_first = (done, cpu_seconds(workers), server_cpu_seconds())
                at_last = (done, cpu_seconds(workers), server_cpu_seconds())
        finally:
            stop_workers(procs)
        with psycopg.connect(URL) as conn:
            done, first, last = conn.execute(
                "SELECT count(*), min(started_at), max(finished_at) FROM nw_jobs.jobs"
                " WHERE project_id = %s AND au_status = 'completed'",
                (project.project_id,),
            ).fetchone()
        print(
            f"drain {done} no-op jobs, {n_workers} worker(s) x {max_concurrent} slots: "
            f"{done / (last - first):,.0f} jobs/s; CPU per job {cpu_per_job(at_first, at_last)}"
        )
    finally:
        close_shared_stores()
        purge(project)


def cpu_per_job(first, last) -> str:
    """Worker and PostgreSQL CPU per job between two ``(done, worker s, server s)`` samples."""
    if first is None or last is None or last[0] <= first[0]:
        return "n/a"
    jobs_between = last[0] - first[0]
    said = []
    for name, a, b in (("workers", first[1], last[1]), ("PostgreSQL", first[2], last[2])):
        per = (
            "n/a" if a is None or b is None or not b else f"{1000 * (b - a) / jobs_between:.2f} ms"
        )
        said.append(f"{name} {per}")
    return ", ".join(said)


def latency(base: Path, n: int) -> None:
    cfg = jobs.JobsConfig(database_url=URL)
    project = new_project(base, "bench-latency")
    store = PostgresJobStore(URL, project.project_id)
    procs = start_workers(project, 1, ["--database-url", URL])
    try:
        time.sleep(1.5)  # let the worker boot and go idle (not a measurement)
        lat = []
        for i in range(n):
            job = jobs.enqueue(project, "bench.noop", {"i": i}, config=cfg)
            while True:
                row = store.get(job.job_id)
                if row.record["finished_at"] is not None:
                    break
                time.sleep(0.0005)
            lat.append(row.record["started_at"] - row.record["created_at"])
            time.sleep(0.02)  # idle again before the next one
    finally:
        stop_workers(procs)
        close_shared_stores()
        purge(project)
    print(
        f"enqueue-to-start into an idle worker ({n} jobs): p50 {pct(lat, 50) * 1e3:.2f} ms, "
        f"p99 {pct(lat, 99) * 1e3:.2f} ms"
    )


def round_trips(base: Path, burst: int, trickle: int, max_concurrent: int) -> None:
    """Round trips and statements per job of one worker connected through
    ``wire_count.WireCounter``: a burst (``burst`` jobs in one ``enqueue_many``)
    and a trickle (one job every 20 ms into an idle worker). Worker start-up
    and a warm-up job are not counted; everything after is (beats, reaps)."""
    from wire_count import WireCounter

    cfg = jobs.JobsConfig(database_url=URL)
    project = new_project(base, "bench-wire")
    url = urlsplit(URL)
    done = 0
    with WireCounter(url.hostname or "127.0.0.1", url.port or 5432) as proxy:
        auth = url.netloc.rpartition("@")[0]
        proxied = urlunsplit(
            url._replace(netloc=f"{auth}@127.0.0.1:{proxy.port}", query="sslmode=disable")
        )
        procs = start_workers(
            project, 1, ["--database-url", proxied, "--max-concurrent", str(max_concurrent)]
        )
        try:
            jobs.enqueue(project, "bench.noop", {"warm": 1}, config=cfg)
            done += 1
            wait_done(project, done)
            for regime, n in (("burst", burst), ("trickle", trickle)):
                time.sleep(0.3)  # idle again (not a measurement)
                before = proxy.snapshot()
                if regime == "burst":
                    items = [("bench.noop", {"b": i}) for i in range(n)]
                    jobs.enqueue_many(project, items, config=cfg)
                else:
                    for i in range(n):
                        time.sleep(0.02)
                        jobs.enqueue(project, "bench.noop", {"t": i}, config=cfg)
                done += n
                wait_done(project, done)
                got = proxy.snapshot()
                got.subtract(before)
                print(
                    f"round trips per job, {regime} of {n} ({max_concurrent} slots):"
                    f" {got['round_trips'] / n:.2f} ({got['statements'] / n:.2f} statements)"
                )
        finally:
            stop_workers(procs)
            close_shared_stores()
            purge(project)


def wait_done(project, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while count_done(project) < n and time.monotonic() < deadline:
        time.sleep(0.02)


def main() -> None:
    global URL
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=URL)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--max-concurrent", type=int, nargs="+", default=[10, 32])
    ap.add_argument("--trickle", type=int, default=50, help="jobs in the trickle (wire)")
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        choices=["ceiling", "list", "enqueue", "drain", "latency", "wire"],
    )
    args = ap.parse_args()
    URL = args.url
    os.environ["NW_TEST_DATABASE_URL"] = URL
    migrate(URL)
    base = Path(tempfile.mkdtemp(prefix="nw-pgbench-"))
    want = set(args.only or ["ceiling", "list", "enqueue", "drain", "latency", "wire"])
    with psycopg.connect(URL) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    print(f"nw.jobs PostgreSQL benchmark: PostgreSQL {version}, {os.cpu_count()} cores")
    try:
        if "ceiling" in want:
            ceiling(5 if args.quick else 10)
        if "list" in want:
            list_jobs_over_history(base, (100, 10_000) if args.quick else (100, 10_000, 100_000))
        if "enqueue" in want:
            enqueue_rate(base, 1000 if args.quick else 4000)
        if "drain" in want:
            for slots in args.max_concurrent:
                for n in (1, 2, 4):
                    drain(base, args.jobs, n, slots)
        if "latency" in want:
            latency(base, 100 if args.quick else 200)
        if "wire" in want:
            round_trips(base, 500, args.trickle, args.max_concurrent[0])
    finally:
        shutdown_runtimes(wait=False)
        close_shared_stores()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
