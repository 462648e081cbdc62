"""The SQL statements each transition of the embedded store sends (issue 32).
Prints; asserts nothing.

    PYTHONPATH=. python misc/bench/sqlite_statements.py [--rounds 2000]

For each transition (create, claim of one job, finish, requeue, cancel of a
queued job, a read), the statements it runs (counted by sqlite3's trace
callback; BEGIN and COMMIT included) and its time per call over ``--rounds``
calls on one connection, in process, no worker. Runs against any checkout
whose ``SqliteJobStore`` has these methods (schema 7 and 8 alike).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from au import ComputationStatus

from nw.jobs.stores.sqlite import SCHEMA_VERSION, SqliteJobStore


def record(i: int, now: float) -> dict:
    return {
        "job_id": f"{i:064x}",
        "kind": "bench",
        "created_at": now,
        "attempt": 0,
        "cancel_requested": False,
        "params": {"i": i},
        "label": f"job {i}",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    n = ap.parse_args().rounds
    store = SqliteJobStore(Path(tempfile.mkdtemp(prefix="nw-stmts-")) / "jobs.sqlite3")
    sent: list[str] = []
    store._conn.set_trace_callback(sent.append)
    store.wake_workers = lambda: None  # type: ignore[method-assign]  (no runners: not counted)
    now = time.time()
    figures: dict[str, tuple[int, float]] = {}

    def measure(name, calls):
        sent.clear()
        t0 = time.perf_counter()
        for call in calls:
            call()
        spent = time.perf_counter() - t0
        figures[name] = (round(len(sent) / len(calls)), spent / len(calls) * 1e6)

    measure("create", [lambda i=i: store.create(record(i, now), claimable=True) for i in range(n)])
    measure(
        "claim (one job)",
        [lambda: store.claim(["bench"], now=now + 1, runner_id="r", limit=1) for _ in range(n)],
    )
    ids = [f"{i:064x}" for i in range(n)]
    half = n // 2
    measure(
        "requeue",
        [
            lambda j=j: store.requeue(j, fields={"error": "again"}, not_before=now, attempt=1)
            for j in ids[:half]
        ],
    )
    store.claim(["bench"], now=now + 2, runner_id="r", limit=half)  # attempt 2 for those
    done = {"finished_at": now + 3, "actual_usd": 0.01}
    measure(
        "finish",
        [
            lambda j=j, a=a: store.finish(
                j,
                au_status=ComputationStatus.COMPLETED,
                result={"ok": True},
                error=None,
                fields=done,
                attempt=a,
            )
            for j, a in [(j, 2) for j in ids[:half]] + [(j, 1) for j in ids[half:]]
        ],
    )
    more = [f"{n + i:064x}" for i in range(n)]
    for i in range(n):
        store.create(record(n + i, now), claimable=True)
    measure("cancel (queued)", [lambda j=j: store.request_cancel(j, now=now + 4) for j in more])
    measure("get", [lambda j=j: store.get(j) for j in ids])
    store.close()
    print(f"embedded store, schema {SCHEMA_VERSION}: statements sent and time per call ({n} calls)")
    for name, (count, us) in figures.items():
        print(f"  {name:<16} {count:>2} statements  {us:7.1f} µs")


if __name__ == "__main__":
    main()
