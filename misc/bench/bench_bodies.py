"""What the benchmarks share: the kinds they register (worker processes import
this module with ``--import bench_bodies``) and starting/stopping those workers."""

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

from nw.jobs import register_kind

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def noop(project, params):
    return {"i": params.get("i")}


register_kind("bench.noop", "bench_bodies:noop")


@contextlib.contextmanager
def scratch_database(url, prefix):
    """A database beside ``url``'s for one run (``prefix`` and a random tail),
    migrated by this checkout; yields its URL, dropped after."""
    import psycopg

    from nw.jobs.stores.pg_schema import migrate

    base, _, _ = url.rpartition("/")
    db = f"{prefix}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {db}")
    try:
        migrate(f"{base}/{db}")
        yield f"{base}/{db}"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def start_workers(project, n, extra=(), module="nw.jobs.execution.worker"):
    """``n`` real worker processes on ``project`` (quiet; ``extra`` CLI flags),
    running this checkout's ``nw``: started in its root, which ``python -m``
    puts first on the path (the current folder would come before
    ``PYTHONPATH``, and another checkout's ``nw`` would run). ``module``: the
    worker's entry (``narrow_worker`` for the narrow-rows prototype)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
    cmd = [sys.executable, "-m", module, "--project", str(project.root),
           "--import", "bench_bodies", "--log-level", "WARNING", *extra]  # fmt: skip
    return [subprocess.Popen(cmd, env=env, cwd=ROOT) for _ in range(n)]


def cpu_seconds(pids) -> float | None:
    """User + system CPU of these processes (all their threads) so far, from
    ``/proc``; None where it cannot be read (not Linux, or a process gone)."""
    total = 0.0
    for pid in pids:
        fields = _stat(pid)
        if fields is None:
            return None
        total += fields[0] + fields[1]
    return total


def server_cpu_seconds() -> float | None:
    """CPU of the PostgreSQL server on this host so far: its live processes',
    and (the postmaster's children times) its backends' that have exited;
    None if it runs elsewhere."""
    total, found = 0.0, False
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() not in ("postgres", "postmaster"):
                    continue
        except OSError:
            continue
        fields = _stat(int(entry))
        if fields is None:
            continue
        found = True
        total += fields[0] + fields[1]
        if fields[4] == 1:  # the postmaster: its exited children's time too
            total += fields[2] + fields[3]
    return total if found else None


def _stat(pid: int) -> tuple[float, float, float, float, int] | None:
    """utime, stime, cutime, cstime (seconds) and the parent pid of a process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(v) / tick for v in fields[11:15])
    return utime, stime, cutime, cstime, int(fields[1])


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


def nap(project, params):
    import time

    time.sleep(float(params.get("seconds", 0.1)))
    return {"i": params.get("i")}


# A job of a provider key (limits_bench.py): its key is params["key"].
register_kind("bench.keyed", "bench_bodies:nap", limit_key="{key}")
