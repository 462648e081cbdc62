"""PostgreSQL drain of this checkout against another, in alternating runs. Prints; asserts nothing.

    python misc/bench/drain_ab.py --before DIR [--url postgresql://…] [--jobs 4000]
        [--workers 1 2] [--pairs 4]
    python misc/bench/drain_ab.py --narrow [...]

This shared machine's speed moves by tens of percent within minutes, more
than most changes to the hot path do, so two drains taken apart compare
the machine's phases as much as the code. This takes them in turns: for
each worker count and pair, a drain by this checkout and one by ``DIR``
(another checkout, e.g. a ``git worktree`` of the commit before), the order
swapped every pair (ABBA), each checkout's jobs in a scratch database it
migrated itself (created and dropped here), each drain in a process that
imports that checkout's ``nw`` and starts that checkout's workers. It prints
every drain (jobs/s from the first start to the last finish, as
``pg_bench.py``; CPU per job of the workers and of PostgreSQL) and, per
worker count, the median of each side and the median of the pairs' ratios.

``--narrow`` compares this checkout with itself over the narrow-rows
prototype (``narrow_rows.sql``, ``narrow_worker.py``: a claim that moves a
queue entry to a run row, a finish that writes the wide row once) instead of
another checkout (the side it prints as ``narrow``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
URL = os.environ.get("NW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def drain(root: Path, url: str, n_jobs: int, n_workers: int, narrow: bool = False) -> dict:
    """One drain by the checkout at ``root`` (run in a process importing it);
    ``narrow``: over the narrow-rows prototype."""
    sys.path[:0] = [str(root), str(root / "misc" / "bench")]
    import psycopg
    from bench_bodies import cpu_seconds, server_cpu_seconds, start_workers, stop_workers

    import nw
    from nw import jobs

    assert Path(nw.__file__).resolve().is_relative_to(root), f"imported {nw.__file__}"
    project = nw.Project.init(Path(tempfile.mkdtemp()) / f"ab-{uuid.uuid4().hex[:6]}")
    config = jobs.JobsConfig(database_url=url)
    for start in range(0, n_jobs, 1000):
        items = [("bench.noop", {"i": i}) for i in range(start, min(start + 1000, n_jobs))]
        jobs.enqueue_many(project, items, config=config)
    if narrow:
        from narrow_worker import prepare

        prepare(url)
    done_sql = "SELECT count(*) FROM nw_jobs.jobs WHERE project_id = %s AND au_status = 'completed'"
    with psycopg.connect(url, autocommit=True) as watch:
        module = "narrow_worker" if narrow else "nw.jobs.execution.worker"
        procs = start_workers(project, n_workers, ["--database-url", url], module=module)
        pids = [p.pid for p in procs]
        for pid in pids:  # `python -m` runs the `nw` of the folder it starts in
            where = Path(os.readlink(f"/proc/{pid}/cwd")).resolve()
            assert where == root.resolve(), f"a worker started in {where}, not {root}"
        try:
            deadline = time.monotonic() + 300
            count = lambda: watch.execute(done_sql, (project.project_id,)).fetchone()[0]  # noqa: E731
            while count() == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            first = (count(), cpu_seconds(pids), server_cpu_seconds())
            while count() < n_jobs and time.monotonic() < deadline:
                time.sleep(0.02)
            last = (count(), cpu_seconds(pids), server_cpu_seconds())
        finally:
            stop_workers(procs)
        done, begun, ended = watch.execute(
            "SELECT count(*), min(started_at), max(finished_at) FROM nw_jobs.jobs"
            " WHERE project_id = %s AND au_status = 'completed'",
            (project.project_id,),
        ).fetchone()
        for table in ("progress", "status", "jobs"):  # `status`: schemas before 0004
            if watch.execute("SELECT to_regclass(%s)", (f"nw_jobs.{table}",)).fetchone()[0]:
                watch.execute(
                    f"DELETE FROM nw_jobs.{table} WHERE project_id = %s", (project.project_id,)
                )
    between = max(last[0] - first[0], 1)
    return {
        "jobs_s": done / (ended - begun),
        "worker_ms": 1000 * (last[1] - first[1]) / between,
        "pg_ms": 1000 * (last[2] - first[2]) / between,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, help="the checkout to compare against (required)")
    ap.add_argument("--url", default=URL, help="a server where scratch databases may be created")
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument(
        "--narrow", action="store_true", help="against the narrow-rows prototype, not --before"
    )
    ap.add_argument("--side", type=Path, help=argparse.SUPPRESS)  # one drain, in a child
    args = ap.parse_args()
    if args.side:
        print(json.dumps(drain(args.side, args.url, args.jobs, args.workers[0], args.narrow)))
        return
    other = "narrow" if args.narrow else "before"
    if args.narrow and args.before is not None:
        ap.error("--narrow compares this checkout with the prototype: give no --before")
    if args.narrow:
        args.before = HERE.parents[1]
    elif args.before is None or not (args.before / "nw").is_dir():
        ap.error("--before must name another checkout of this project (a folder holding nw/)")
    import psycopg

    roots = {"this": HERE.parents[1], other: args.before.resolve()}
    base, _, _ = args.url.rpartition("/")
    dbs = {side: f"nw_ab_{side}_{uuid.uuid4().hex[:6]}" for side in roots}
    with psycopg.connect(args.url, autocommit=True) as admin:
        for db in dbs.values():
            admin.execute(f"CREATE DATABASE {db}")
    try:
        for side, root in roots.items():  # each schema as its own code migrates it
            # (in the checkout's root: `-c` puts the current folder first on the path)
            subprocess.run(
                [sys.executable, "-c", "import sys; from nw.jobs.stores.pg_schema import migrate;"
                 " migrate(sys.argv[1])", f"{base}/{dbs[side]}"],
                env={**os.environ, "PYTHONPATH": str(root)}, check=True, cwd=root,
            )  # fmt: skip
        for workers in args.workers:
            got: dict[str, list[dict]] = {side: [] for side in roots}
            for pair in range(args.pairs):
                order = ["this", other] if pair % 2 == 0 else [other, "this"]
                for side in order:
                    out = subprocess.run(
                        [sys.executable, __file__, "--side", str(roots[side]), "--url",
                         f"{base}/{dbs[side]}", "--jobs", str(args.jobs), "--workers",
                         str(workers), *(["--narrow"] if side == "narrow" else [])],
                        env={**os.environ, "PYTHONPATH": ""}, check=True, capture_output=True,
                        text=True, cwd=roots[side],  # its workers run the checkout there
                    ).stdout  # fmt: skip
                    run = json.loads(out.strip().splitlines()[-1])
                    got[side].append(run)
                    print(
                        f"{workers} worker(s), pair {pair + 1}, {side:>6}: {run['jobs_s']:,.0f}"
                        f" jobs/s; CPU per job workers {run['worker_ms']:.2f} ms,"
                        f" PostgreSQL {run['pg_ms']:.2f} ms",
                        flush=True,
                    )
            ratios = [
                a["jobs_s"] / b["jobs_s"] for a, b in zip(got["this"], got[other], strict=True)
            ]
            medians = {s: statistics.median(r["jobs_s"] for r in got[s]) for s in roots}
            print(
                f"{workers} worker(s): this {medians['this']:,.0f} jobs/s, {other}"
                f" {medians[other]:,.0f} (medians of {args.pairs}); this/{other} per pair"
                f" {', '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}"
            )
    finally:
        with psycopg.connect(args.url, autocommit=True) as admin:
            for db in dbs.values():
                admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


if __name__ == "__main__":
    main()
