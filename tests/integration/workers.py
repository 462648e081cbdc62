"""Starting real worker processes for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])


def start_worker(
    project, *, max_concurrent=3, env=None, extra=(), database_url=None, log_path=None
):
    """A worker process; its log (WARNING and up) goes to ``log_path`` when given."""
    args = [
        sys.executable,
        "-m",
        "nw.jobs.worker",
        "--project",
        str(project.root),
        "--import",
        "tests.fixtures.bodies",
        "--max-concurrent",
        str(max_concurrent),
        "--heartbeat-interval",
        "0.2",
        "--heartbeat-stale",
        "1.0",
        "--log-level",
        "WARNING",
        *extra,
    ]
    if database_url:
        args += ["--database-url", database_url]
    return subprocess.Popen(
        args,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=open(log_path, "w") if log_path else subprocess.DEVNULL,
        text=True,
    )


def stop(proc, timeout=20):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stored_record(project, cfg, job_id) -> dict:
    """The job's record as the store holds it ({} while there is none)."""
    from nw.jobs.stores import open_store

    store = open_store(project, cfg, create=False)
    if store is None:
        return {}
    try:
        row = store.get(job_id)
    finally:
        store.close()
    return {} if row is None else row.record


def registered_workers(project, cfg) -> int:
    """Worker processes announced in the project's store (0 while it has none)."""
    from nw.jobs.stores import open_store

    store = open_store(project, cfg, create=False)
    if store is None:
        return 0
    try:
        return sum(r.get("role") == "worker" for r in store.runners())
    finally:
        store.close()
