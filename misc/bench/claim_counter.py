"""Bench-only instrument (``--import claim_counter`` in a worker): counts this
process's claim calls and the jobs they returned in ``$NW_BENCH_CLAIMS.<pid>``
(one line: calls, jobs, empty calls), rewritten after every claim (a worker
whose bodies outlive its grace period leaves by ``os._exit``, without atexit)."""

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
        path = os.environ.get("NW_BENCH_CLAIMS")
        if path:
            with open(f"{path}.{os.getpid()}", "w") as f:
                f.write(f"{_counts['calls']} {_counts['jobs']} {_counts['empty']}\n")
        return rows

    return wrapper


for cls in (SqliteJobStore, PostgresJobStore):
    cls.claim = _counted(cls.claim)
