"""How long a PostgreSQL worker takes from its spawn to its first claim. Prints; asserts nothing.

    python misc/bench/worker_start.py [--url postgresql://…] [--runs 7] [--bytecode both]

The shared harness times a drain from the workers' spawn (``worker_peers.py``:
"drain, jobs/s from their start"), so on 2,000 jobs a worker's start is about
a third of the figure. This spawns ``nw-jobs worker`` (the console script of
the interpreter running this, as the harness does) ``--runs`` times on a
project with queued no-op jobs and prints the time from ``Popen`` to the
first job's ``started_at``, median and all.

``--bytecode``: ``as-is`` runs the checkout as it is; ``compiled`` first
writes every ``nw`` module's bytecode (``compileall``: what pip does for a
package it installs from a wheel, and for every other peer of the harness),
``source`` first removes it (an editable install run with
``PYTHONDONTWRITEBYTECODE=1``, as on this machine, compiles every module of
``nw`` at every start); ``both`` runs ``source`` then ``compiled`` and leaves
the bytecode written. A scratch database is created and dropped here.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
URL = os.environ.get("NW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _bytecode(mode: str) -> None:
    caches = list((ROOT / "nw").rglob("__pycache__"))
    if mode == "source":
        for cache in caches:
            shutil.rmtree(cache)
    elif mode == "compiled":
        compileall.compile_dir(ROOT / "nw", quiet=1)


def starts(url: str, runs: int) -> list[float]:
    """Seconds from each worker's spawn to its first claim."""
    import bench_bodies  # noqa: F401  (registers bench.noop)

    import nw
    from nw import jobs

    project = nw.Project.init(Path(tempfile.mkdtemp()) / "start")
    config = jobs.JobsConfig(database_url=url)
    script = Path(sys.executable).with_name("nw-jobs")
    env = {**os.environ, "NW_JOBS_DATABASE_URL": url, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
    first_start = (
        "SELECT min(started_at) FROM nw_jobs.jobs WHERE project_id = %s"
        " AND (doc->'params'->>'run')::int = %s"
    )
    out = []
    with psycopg.connect(url, autocommit=True) as watch:
        for run in range(runs):
            jobs.enqueue_many(
                project, [("bench.noop", {"run": run, "i": i}) for i in range(20)], config=config
            )
            cmd = [str(script), "worker", "--project", str(project.root),
                   "--import", "bench_bodies", "--max-concurrent", "10"]  # fmt: skip
            spawned = time.time()
            proc = subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    got = watch.execute(first_start, (project.project_id, run)).fetchone()[0]
                    if got is not None:
                        out.append(got - spawned)
                        break
                    time.sleep(0.002)
            finally:
                proc.terminate()
                proc.wait(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=URL, help="a server where a scratch database may be made")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--bytecode", choices=["as-is", "source", "compiled", "both"], default="both")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(HERE)]
    from bench_bodies import scratch_database

    with scratch_database(args.url, "nw_start") as url:
        modes = ["source", "compiled"] if args.bytecode == "both" else [args.bytecode]
        for mode in modes:
            _bytecode(mode)
            got = starts(url, args.runs)
            print(
                f"{mode:>8}: spawn to first claim, median {1000 * statistics.median(got):.0f} ms"
                f" (runs: {', '.join(f'{1000 * s:.0f}' for s in got)})",
                flush=True,
            )


if __name__ == "__main__":
    main()
