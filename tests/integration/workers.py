"""Starting real worker processes for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])


def start_worker(
    project, *, max_concurrent=3, env=None, extra=(), database_url=None, log_path=None
):
    """A worker process; its log (WARNING and up) goes to ``log_path`` when given."""
    args = [
        sys.executable,
        "-m",
        "nw.jobs.execution.worker",
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


def pause_outside_a_write(worker: subprocess.Popen, project, cfg) -> None:
    """SIGSTOP ``worker`` at a moment it holds no write lock of the embedded
    store. A process frozen inside a SQLite write transaction holds the
    file's write lock, and no other process can write until it resumes: the
    nature of the embedded store (PostgreSQL locks rows, and a worker's
    statements commit as they are sent), not what these tests are about."""
    from nw.jobs.stores import open_store

    if cfg.database_url:
        worker.send_signal(signal.SIGSTOP)
        return
    store = open_store(project, cfg, create=False)
    path = store.path
    store.close()
    for _ in range(100):
        worker.send_signal(signal.SIGSTOP)
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=0.05)) as probe:
                probe.execute("BEGIN IMMEDIATE")
                probe.rollback()
            return
        except sqlite3.OperationalError:  # frozen mid-write: let it finish, try again
            worker.send_signal(signal.SIGCONT)
            time.sleep(0.01)
    raise AssertionError("the worker was inside a write at every pause")
