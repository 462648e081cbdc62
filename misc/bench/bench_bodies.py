"""What the benchmarks share: the kinds they register (worker processes import
this module with ``--import bench_bodies``) and starting/stopping those workers."""

import os
import subprocess
import sys
from pathlib import Path

from nw.jobs import register_kind

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def noop(project, params):
    return {"i": params.get("i")}


register_kind("bench.noop", "bench_bodies:noop")


def start_workers(project, n, extra=()):
    """``n`` real worker processes on ``project`` (quiet; ``extra`` CLI flags)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
    cmd = [sys.executable, "-m", "nw.jobs.worker", "--project", str(project.root),
           "--import", "bench_bodies", "--log-level", "WARNING", *extra]  # fmt: skip
    return [subprocess.Popen(cmd, env=env) for _ in range(n)]


def stop_workers(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(30)


def hold(project, params, *, should_cancel):
    """Runs until cancelled or ``seconds`` pass (the orphan benchmark kills its worker)."""
    import time

    deadline = time.monotonic() + float(params.get("seconds", 60))
    while time.monotonic() < deadline and not should_cancel():
        time.sleep(0.05)
    return {"held": True}


register_kind("bench.hold", "bench_bodies:hold", retryable=True, max_attempts=3)
register_kind("bench.hold_once", "bench_bodies:hold")


def spin(project, params):
    """Pure-Python busy work for ``seconds``: holds the GIL between switch intervals."""
    import time

    deadline = time.monotonic() + float(params.get("seconds", 10))
    n = 0
    while time.monotonic() < deadline:
        n += sum(i * i for i in range(1000))
    return {"n": n}


register_kind("bench.spin", "bench_bodies:spin")
