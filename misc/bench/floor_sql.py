"""The floor's table and statements (``peer_floor.py``, ``hot_path_shapes.py``): one
narrow table, one queue index, a claim, and the finish-and-claim of a batch."""

SCHEMA = """
CREATE TABLE floor_jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text        NOT NULL,
    params      jsonb       NOT NULL,
    status      smallint    NOT NULL DEFAULT 0,  -- 0 queued, 1 running, 2 done
    attempt     integer     NOT NULL DEFAULT 0,
    runner      text,
    started_at  timestamptz,
    finished_at timestamptz
);
CREATE INDEX floor_queue ON floor_jobs (id) WHERE status = 0;
"""

CLAIM = """
UPDATE floor_jobs j
   SET status = 1, attempt = j.attempt + 1, runner = %(runner)s, started_at = clock_timestamp()
  FROM (SELECT id FROM floor_jobs WHERE status = 0 ORDER BY id
         LIMIT %(want)s FOR UPDATE SKIP LOCKED) q
 WHERE j.id = q.id
RETURNING j.id, j.kind, j.params
"""

FINISH_AND_CLAIM = """
WITH f AS (
  UPDATE floor_jobs SET status = 2, finished_at = clock_timestamp()
   WHERE id = ANY(%(done)s) AND runner = %(runner)s AND status = 1
), c AS (
  UPDATE floor_jobs j
     SET status = 1, attempt = j.attempt + 1, runner = %(runner)s,
         started_at = clock_timestamp()
    FROM (SELECT id FROM floor_jobs WHERE status = 0 ORDER BY id
           LIMIT %(want)s FOR UPDATE SKIP LOCKED) q
   WHERE j.id = q.id
  RETURNING j.id, j.kind, j.params
)
SELECT id, kind, params FROM c
"""
