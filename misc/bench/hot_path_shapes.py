"""What a worker's finish-and-claim statement costs on the server, by schema shape.

    python misc/bench/hot_path_shapes.py [--url postgresql://…] [--jobs 20000] [--rounds 300]

Issue 13 asks how much of a PostgreSQL drain's time is the shape of the rows
a claim and a finish write. This measures one statement, the one a busy
worker sends per batch (ten finishes, the ten claims that take their slots),
in a loop on one connection, in several shapes over 20,000 queued jobs each:

* ``current``: the store's own ``finish_many_and_claim`` on the real schema
  (``pg_migrations/``): a claim and a finish each rewrite the wide ``jobs``
  row (ten indexes), its au status entry included (migration 0004; before
  it, each also rewrote a row of a ``status`` table);
* ``no log``: the same, with a claim that does not append the attempt
  to the record's ``attempts`` log (the ``jsonb_set`` of the wide ``doc``);
* ``HOT claim``: the store's statement and writes, but claiming from a
  narrow queue table (its rows deleted by the claim) on a ``jobs`` table
  whose indexes name no column a claim changes (no ``jobs_claim``; the state
  index keyed by a generated column that is NULL until the job finishes;
  the running count's and the finished index's without ``started_at``), so
  the claim's update of the wide row can be a heap-only (HOT) update, with
  no index entries (a second scratch database, whose ``jobs`` pages are
  filled to ``--fillfactor``, 40% by default: a claim updates ten
  neighbouring rows in one transaction, and at the migrated 80% the first
  one or two of a page take its free space, so only about a fifth of the
  updates were heap-only; at 40%, 94% of the claims' were). It also prints how
  many of the ``jobs`` updates were heap-only in each database;
* ``narrow claim``: a prototype (scratch tables in the schema ``nw_shapes``,
  dropped after): a claim deletes a narrow queue entry and inserts a narrow
  run row (attempt, lease, runner, beats); a finish fences on that row,
  deletes it and writes the wide ``jobs`` row once. It leaves out what the
  store's statement also does (the attempts log with the runner's host and
  pid, the finish's column patches, the limits' counts): with those,
  ``narrow_rows.sql`` took 0.9x the store's server time, and drained no
  faster (``drain_ab.py --narrow``, ``HISTORY.md``, 2026-12-03).
* ``floor``: the statement of ``peer_floor.py`` (``floor_sql.py``: one narrow
  table keyed by a bigint, one queue index, the finishes and the claims two
  plain updates), alone, on rows as wide as nw-jobs' (a 725-byte ``doc`` the
  statement never touches), and on those with ten more indexes (eleven
  besides the primary key; ``jobs`` has nine): what the floor's workers
  would pay for nw-jobs' row width and index count.

It prints the statement's wall time on the client and its execution time on
the server (``pg_stat_statements`` is not needed: the server's own
``clock_timestamp()`` around the statement, read back in the same round
trip), median and mean. A prototype, not the store: what it measures is the
cost of the shape, to decide whether a migration to it would pay.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from floor_sql import CLAIM as FLOOR_CLAIM  # noqa: E402
from floor_sql import FINISH_AND_CLAIM as FLOOR_FINISH_AND_CLAIM  # noqa: E402
from floor_sql import SCHEMA as FLOOR_SCHEMA  # noqa: E402

from nw.jobs.stores.pg_schema import migrate  # noqa: E402
from nw.jobs.stores.sql import load_queries  # noqa: E402

URL = os.environ.get("NW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
KIND = "shape.noop"

NARROW_DDL = """
CREATE SCHEMA nw_shapes;
CREATE TABLE nw_shapes.queue (
    project_id text NOT NULL, job_id text NOT NULL, priority integer NOT NULL,
    actor_seq bigint NOT NULL, created_at double precision NOT NULL, kind text NOT NULL,
    queue_at double precision NOT NULL, PRIMARY KEY (project_id, job_id));
CREATE INDEX queue_claim
    ON nw_shapes.queue (project_id, priority DESC, actor_seq, created_at, job_id);
CREATE TABLE nw_shapes.runs (
    project_id text NOT NULL, job_id text NOT NULL, attempt integer NOT NULL,
    runner_id text NOT NULL, lease text NOT NULL, started_at double precision NOT NULL,
    heartbeat_at double precision NOT NULL, PRIMARY KEY (project_id, job_id));
"""

NARROW_FINISH_AND_CLAIM = """
WITH p AS (
  SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb)
      AS x(job_id text, attempt integer, au_status text, doc jsonb)
), fr AS (
  DELETE FROM nw_shapes.runs r USING p
   WHERE r.project_id = %(project_id)s AND r.job_id = p.job_id AND r.attempt = p.attempt
  RETURNING r.job_id
), fj AS (
  UPDATE nw_jobs.jobs j
     SET au_status = p.au_status, finished_at = %(now)s, doc = j.doc || p.doc
    FROM fr JOIN p USING (job_id)
   WHERE j.project_id = %(project_id)s AND j.job_id = fr.job_id
  RETURNING j.job_id
), picked AS (
  DELETE FROM nw_shapes.queue q
   WHERE q.project_id = %(project_id)s AND q.job_id IN (
         SELECT job_id FROM nw_shapes.queue
          WHERE project_id = %(project_id)s AND queue_at <= %(now)s
            AND kind = ANY(%(kinds)s::text[])
          ORDER BY priority DESC, actor_seq, created_at, job_id
          LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED)
  RETURNING q.job_id
), ins AS (
  INSERT INTO nw_shapes.runs (project_id, job_id, attempt, runner_id, lease, started_at,
                              heartbeat_at)
  SELECT %(project_id)s, job_id, 1, %(runner_id)s, %(lease)s, %(now)s, %(now)s FROM picked
  RETURNING job_id, attempt
)
SELECT (SELECT array_agg(job_id) FROM fj) AS finished, ins.job_id, ins.attempt, j.created_at,
       j.kind, j.doc
  FROM ins JOIN nw_jobs.jobs j ON j.project_id = %(project_id)s AND j.job_id = ins.job_id
"""

HOT_DDL = """
CREATE TABLE nw_jobs.queue (
    project_id text NOT NULL, job_id text NOT NULL, priority integer NOT NULL,
    actor_seq bigint NOT NULL, created_at double precision NOT NULL, kind text NOT NULL,
    limit_key text, queue_at double precision NOT NULL, PRIMARY KEY (project_id, job_id));
CREATE INDEX queue_claim
    ON nw_jobs.queue (project_id, priority DESC, actor_seq, created_at, job_id);
DROP INDEX nw_jobs.jobs_claim;
DROP INDEX nw_jobs.jobs_state;
DROP INDEX nw_jobs.jobs_limit_running;
DROP INDEX nw_jobs.jobs_finished;
ALTER TABLE nw_jobs.jobs ADD COLUMN settled text
    GENERATED ALWAYS AS (CASE WHEN finished_at IS NULL THEN NULL
                              WHEN cancel_requested THEN 'cancelled'
                              WHEN au_status = 'completed' THEN 'succeeded'
                              ELSE au_status END) STORED;
CREATE INDEX jobs_settled ON nw_jobs.jobs (project_id, settled, created_at DESC, job_id DESC)
    WHERE settled IS NOT NULL;
CREATE INDEX jobs_limit_live ON nw_jobs.jobs (limit_key)
    WHERE limit_key IS NOT NULL AND finished_at IS NULL;
CREATE INDEX jobs_finished ON nw_jobs.jobs (project_id, finished_at) INCLUDE (kind)
    WHERE finished_at IS NOT NULL;
"""

TIMED = "SELECT clock_timestamp() AS t"


def bulk_queue(conn, project_id: str, n: int) -> None:
    """``n`` queued no-op jobs of one project, as ``create_many`` writes them."""
    rows = [
        {
            "job_id": f"{i:064x}",
            "created_at": 1_700_000_000.0 + i,
            "doc": {"job_id": f"{i:064x}", "kind": KIND, "params": {"i": i}, "label": KIND},
        }
        for i in range(n)
    ]
    conn.execute(
        """
        WITH x AS (SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
                     AS x(job_id text, created_at double precision, doc jsonb)),
        jb AS (
          INSERT INTO nw_jobs.jobs (project_id, job_id, created_at, kind, attempt, doc,
                                    au_status, queue_at, priority, actor_seq)
          SELECT %(p)s, job_id, created_at, %(kind)s, 0, doc, 'pending', created_at, 0, 1
            FROM x RETURNING job_id)
        SELECT count(*) FROM jb
        """,
        {"rows": json.dumps(rows), "p": project_id, "kind": KIND},
    )


def timed(conn, query: str, params: dict) -> tuple[float, float, list[dict]]:
    """(client wall s, server s, rows) of one statement in one pipeline."""
    t = time.perf_counter()
    with conn.pipeline():
        before = conn.execute(TIMED)
        cur = conn.execute(query, params)
        after = conn.execute(TIMED)
    wall = time.perf_counter() - t
    rows = cur.fetchall()
    server = (after.fetchone()["t"] - before.fetchone()["t"]).total_seconds()
    return wall, server, rows


def finish_batch(rows: list[dict], now: float) -> list[dict]:
    return [
        {
            "job_id": r["job_id"],
            "attempt": r["attempt"],
            "au_status": "completed",
            "value": None,
            "error": None,
            "cols": {"finished_at": now},
            "doc": {"finished_at": now, "actual_usd": 0.0},
        }
        for r in rows
    ]


def without_attempts_log(statement: str) -> str:
    """``statement`` with a claim that leaves ``doc`` as it is."""
    start = statement.index("doc = jsonb_set(j.doc, '{attempts}',")
    end = statement.index("'started_at', %(now)s::double precision)))", start)
    end += len("'started_at', %(now)s::double precision)))")
    return statement[:start] + "doc = j.doc" + statement[end:]


def hot_claim(statement: str) -> str:
    """``finish_many_and_claim`` claiming from ``nw_jobs.queue`` (HOT_DDL)."""
    source = statement.index("FROM (SELECT job_id, limit_key FROM nw_jobs.jobs")
    end = statement.index("FOR UPDATE SKIP LOCKED) j", source) + len("FOR UPDATE SKIP LOCKED) j")
    claim = """    FROM (SELECT job_id, limit_key FROM nw_jobs.queue
           WHERE project_id = %(project_id)s AND queue_at <= %(now)s
             AND kind = ANY(%(kinds)s::text[])
             AND (limit_key IS NULL OR limit_key NOT IN (SELECT limit_key FROM blocked))
           ORDER BY priority DESC, actor_seq, created_at, job_id
           LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED) j
), qd AS (
  DELETE FROM nw_jobs.queue q USING picked
   WHERE q.project_id = %(project_id)s AND q.job_id = picked.job_id"""
    statement = statement[:source] + claim + statement[end:]
    return statement.replace(
        "WHERE r.limit_key = l.limit_key AND r.started_at IS NOT NULL",
        "WHERE r.limit_key = l.limit_key",
    )


def run_current(
    conn, statement: str, claim: str, project_id: str, rounds: int, batch: int
) -> list[tuple[float, float]]:
    base = {"project_id": project_id, "kinds": [KIND], "runner_id": "shape", "skip_keys": []}
    first = {"now": 2e9, "limit": batch, "lease": uuid.uuid4().hex, "batch": "[]", "job_ids": []}
    rows = [r for r in conn.execute(claim, {**base, **first}).fetchall() if r["job_id"]]
    out = []
    for i in range(rounds):
        now = 2e9 + i
        args = {
            **base,
            "now": now,
            "limit": batch,
            "lease": uuid.uuid4().hex,
            "batch": json.dumps(finish_batch(rows, now)),
            "job_ids": [r["job_id"] for r in rows],
        }
        wall, server, got = timed(conn, statement, args)
        rows = [r for r in got if r["job_id"] is not None]
        out.append((wall, server))
    return out


def run_narrow(conn, project_id: str, rounds: int, batch: int) -> list[tuple[float, float]]:
    conn.execute(
        "INSERT INTO nw_shapes.queue SELECT project_id, job_id, priority, actor_seq, created_at,"
        " kind, queue_at FROM nw_jobs.jobs WHERE project_id = %s AND queue_at IS NOT NULL",
        (project_id,),
    )
    base = {"project_id": project_id, "kinds": [KIND], "runner_id": "shape", "limit": batch}
    rows: list[dict] = []
    out = []
    for i in range(rounds + 1):
        now = 2e9 + i
        args = {**base, "now": now, "lease": uuid.uuid4().hex}
        args["batch"] = json.dumps(finish_batch(rows, now))
        wall, server, got = timed(conn, NARROW_FINISH_AND_CLAIM, args)
        if rows:  # the first round only claims
            out.append((wall, server))
        rows = got
    return out


#: A no-op job's record as nw-jobs' ``doc`` holds it (725 bytes), for the floor's wide rows.
WIDE_DOC = {
    "label": KIND, "params": {"i": 0}, "run_id": "0" * 32, "runner": "worker", "eta_key": None,
    "eta_p50": 30.0, "eta_p90": 45.0, "attempts": [], "priority": 0, "limit_key": None,
    "retryable": False, "not_before": None, "output_kind": None, "eta_progress": None,
    "max_attempts": 1, "estimated_usd": None, "eta_candidates": [], "eta_confidence": "prior",
    "idempotency_key": "0" * 64, "expected_cache_hit": False, "actor": None, "units": None,
}  # fmt: skip
FLOOR_SHAPES = {
    "floor": (False, 0),
    "floor, wide row": (True, 0),
    "floor, wide, 11 idx": (True, 10),
}


def run_floor(
    conn, wide: bool, indexes: int, jobs: int, rounds: int, batch: int
) -> list[tuple[float, float]]:
    """The floor's statement (``floor_sql.py``, one narrow table with one
    index) over ``jobs`` queued rows; ``wide``: each row also carries a
    ``doc`` as wide as nw-jobs' (never read or written by the statement);
    ``indexes``: that many more indexes on columns the claim changes."""
    conn.execute("DROP TABLE IF EXISTS floor_jobs")
    conn.execute(FLOOR_SCHEMA)
    if wide:
        conn.execute("ALTER TABLE floor_jobs ADD COLUMN doc jsonb")
    for i in range(indexes):
        conn.execute(f"CREATE INDEX floor_extra_{i} ON floor_jobs (kind, runner, id, started_at)")
    conn.execute(
        "INSERT INTO floor_jobs (kind, params"
        + (", doc" if wide else "")
        + ") SELECT %(kind)s, jsonb_build_object('i', g)"
        + (", %(doc)s::jsonb" if wide else "")
        + " FROM generate_series(1, %(n)s) g",
        {"kind": KIND, "doc": json.dumps(WIDE_DOC), "n": jobs},
    )
    rows = conn.execute(FLOOR_CLAIM, {"runner": "shape", "want": batch}).fetchall()
    out = []
    for _ in range(rounds):
        args = {"done": [r["id"] for r in rows], "runner": "shape", "want": batch}
        wall, server, rows = timed(conn, FLOOR_FINISH_AND_CLAIM, args)
        out.append((wall, server))
    conn.execute("DROP TABLE floor_jobs")
    return out


def report(name: str, samples: list[tuple[float, float]], batch: int) -> None:
    walls = [w * 1000 for w, _ in samples]
    servers = [s * 1000 for _, s in samples]
    print(
        f"{name:>17}: {batch} finishes + {batch} claims per statement, {len(samples)} statements:"
        f" server {statistics.median(servers):.2f} ms median ({statistics.mean(servers):.2f} mean),"
        f" client wall {statistics.median(walls):.2f} ms median"
        f" = {statistics.median(servers) / batch * 1000:.0f} us of server time per job"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=URL)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3, help="alternating runs of each shape")
    ap.add_argument(
        "--fillfactor", type=int, default=40, help="how full the HOT shape's jobs pages are filled"
    )
    args = ap.parse_args()
    base, _, _ = args.url.rpartition("/")
    dbs = [f"nw_shapes_{uuid.uuid4().hex[:8]}" for _ in range(2)]  # as migrated; HOT_DDL
    with psycopg.connect(args.url, autocommit=True) as admin:
        for db in dbs:
            admin.execute(f"CREATE DATABASE {db}")
    urls = [f"{base}/{db}" for db in dbs]
    settings = "SET enable_bitmapscan = off; SET enable_sort = off; SET jit = off"
    try:
        q = load_queries("postgres_queries.sql")
        fold = q["finish_many_and_claim"]
        for url in urls:
            migrate(url)
        with (
            psycopg.connect(urls[0], autocommit=True, row_factory=dict_row) as conn,
            psycopg.connect(urls[1], autocommit=True, row_factory=dict_row) as hot,
        ):
            conn.execute(NARROW_DDL)
            hot.execute(HOT_DDL)
            hot.execute(f"ALTER TABLE nw_jobs.jobs SET (fillfactor = {int(args.fillfactor)})")
            conn.execute(settings)
            hot.execute(settings)
            shapes = ("current", "no log", "HOT claim", "narrow claim")
            for pair in range(args.pairs):
                for name, (wide, indexes) in FLOOR_SHAPES.items():
                    got = run_floor(conn, wide, indexes, args.jobs, args.rounds, args.batch)
                    report(name, got, args.batch)
                for name in shapes:
                    project_id = f"shape-{pair}-{name[0]}-{uuid.uuid4().hex[:6]}"
                    on = hot if name == "HOT claim" else conn
                    bulk_queue(on, project_id, args.jobs)
                    if name == "narrow claim":
                        got = run_narrow(conn, project_id, args.rounds, args.batch)
                        report(name, got, args.batch)
                        continue
                    statement = fold
                    if name == "HOT claim":
                        on.execute(
                            "INSERT INTO nw_jobs.queue SELECT project_id, job_id, priority,"
                            " actor_seq, created_at, kind, limit_key, queue_at FROM nw_jobs.jobs"
                            " WHERE project_id = %s AND queue_at IS NOT NULL",
                            (project_id,),
                        )
                        statement = hot_claim(fold)
                    elif name == "no log":
                        statement = without_attempts_log(fold)
                    claim = hot_claim(fold) if name == "HOT claim" else q["claim"]
                    got = run_current(on, statement, claim, project_id, args.rounds, args.batch)
                    report(name, got, args.batch)
            for label, c in (("as migrated", conn), ("HOT_DDL", hot)):
                c.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, now
                c.execute("SELECT 1")
                upd, hot_upd = (
                    c.execute(
                        "SELECT n_tup_upd AS u, n_tup_hot_upd AS h FROM pg_stat_user_tables"
                        " WHERE schemaname = 'nw_jobs' AND relname = 'jobs'"
                    )
                    .fetchone()
                    .values()
                )
                print(f"jobs rows updated, {label}: {upd}, of which heap-only (HOT): {hot_upd}")
    finally:
        with psycopg.connect(args.url, autocommit=True) as admin:
            for db in dbs:
                admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


if __name__ == "__main__":
    main()
