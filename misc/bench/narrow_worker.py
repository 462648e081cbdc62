"""``nw-jobs worker`` over the narrow-rows prototype, for ``drain_ab.py --narrow``.

    python -m narrow_worker ARGS...   (the worker's own arguments)

The store's ``claim``, ``finish_many`` and ``finish_many_and_claim`` are
replaced by the prototype's (``narrow_rows.sql``); ``prepare(url)`` adds its
tables to a migrated database and queues the jobs already there. Not a
store: what a no-op drain runs, to measure the shape.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

from nw.jobs.stores import pg_base, pg_claims, pg_finishes, postgres
from nw.jobs.stores.sql import parse_queries

NARROW = parse_queries((Path(__file__).resolve().parent / "narrow_rows.sql").read_text())
# The finishes alone (a refill that claims nothing): the same finish, without the claim.
_FINISH = NARROW["finish_many_and_claim"]
NARROW["finish_many"] = (
    _FINISH[: _FINISH.index("), blocked AS MATERIALIZED")] + ")\nSELECT job_id FROM fj;"
)


def prepare(url: str) -> None:
    """The prototype's tables in a migrated database, its queued jobs entered."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(NARROW["ddl"])
        conn.execute(NARROW["fill"])


def patch_store() -> None:
    names = ("claim", "finish_many", "finish_many_and_claim")
    queries = {**pg_base.Q, **{name: NARROW[name] for name in names}}
    for module in (pg_base, pg_claims, pg_finishes, postgres):  # each holds its Q
        module.Q = queries
    beat_then_claim = f"{queries['beat_runner']}\n;\n{queries['claim']}"
    pg_base._BEAT_THEN_CLAIM = pg_claims._BEAT_THEN_CLAIM = beat_then_claim


if __name__ == "__main__":
    patch_store()
    from nw.jobs.execution.worker import main

    sys.exit(main(sys.argv[1:]))
