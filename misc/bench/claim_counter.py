"""Bench-only instrument (``--import claim_counter`` in a worker): counts this
process's claim calls and the jobs they returned, written at exit to the file
named by ``NW_BENCH_CLAIMS`` (one line: calls, jobs, empty calls)."""

import atexit
import os

from nw.jobs.stores.postgres import PostgresJobStore
from nw.jobs.stores.sqlite import SqliteJobStore

_counts = {"calls": 0, "jobs": 0, "empty": 0}


def _counted(claim):
    def wrapper(self, *args, **kwargs):
        rows = claim(self, *args, **kwargs)
        _counts["calls"] += 1
        _counts["jobs"] += len(rows)
        _counts["empty"] += not rows
        return rows

    return wrapper


for cls in (SqliteJobStore, PostgresJobStore):
    cls.claim = _counted(cls.claim)


@atexit.register
def _write():
    path = os.environ.get("NW_BENCH_CLAIMS")
    if path:
        with open(path, "a") as f:
            f.write(f"{_counts['calls']} {_counts['jobs']} {_counts['empty']}\n")
