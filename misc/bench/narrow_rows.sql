-- A prototype of the narrow hot path (issue 13), for `drain_ab.py --narrow`:
-- a claim deletes the job's entry from a narrow queue table and inserts a
-- narrow run row (attempt, lease, runner, beats, the attempts-log entry); a
-- finish, fenced by the run row, deletes it and writes the wide `jobs` row
-- once. The statements keep what the store's keep (the attempts log with the
-- runner's host and pid, the finish's column patches, the limits' running
-- counts, claim order), so a drain measures the shape, not a shortcut.
-- Only what a no-op drain runs is here (no requeue, cancel, beat or reads).
-- Measured 2026-12-03 (misc/bench/HISTORY.md): the statement's server time
-- 0.9x the store's, and no gain in a drain.

-- name: ddl
CREATE TABLE IF NOT EXISTS nw_jobs.queue (
    project_id text NOT NULL, job_id text NOT NULL, priority integer NOT NULL,
    actor_seq bigint NOT NULL, created_at double precision NOT NULL, kind text NOT NULL,
    limit_key text, queue_at double precision NOT NULL, PRIMARY KEY (project_id, job_id));
CREATE INDEX IF NOT EXISTS queue_claim ON nw_jobs.queue (project_id, priority DESC, actor_seq, created_at, job_id);
CREATE TABLE IF NOT EXISTS nw_jobs.runs (
    project_id text NOT NULL, job_id text NOT NULL, attempt integer NOT NULL,
    lease text NOT NULL, runner_id text NOT NULL, started_at double precision NOT NULL,
    heartbeat_at double precision NOT NULL, limit_key text, entry jsonb NOT NULL,
    PRIMARY KEY (project_id, job_id));
CREATE INDEX IF NOT EXISTS runs_limit ON nw_jobs.runs (limit_key) WHERE limit_key IS NOT NULL;
DROP INDEX IF EXISTS nw_jobs.jobs_claim;

-- name: fill
INSERT INTO nw_jobs.queue
SELECT project_id, job_id, priority, actor_seq, created_at, kind, limit_key, queue_at
  FROM nw_jobs.jobs WHERE queue_at IS NOT NULL AND finished_at IS NULL;

-- name: claim
WITH blocked AS MATERIALIZED (
  SELECT l.limit_key FROM nw_jobs.limits l
   WHERE l.limit_key = ANY(%(skip_keys)s::text[])
      OR l.max_running <= (SELECT count(*) FROM nw_jobs.runs r WHERE r.limit_key = l.limit_key)
      OR l.per_second <= (SELECT count(*) FROM unnest(l.starts) t WHERE t > %(now)s - 1.0)
), picked AS (
  DELETE FROM nw_jobs.queue q
   USING (SELECT job_id FROM nw_jobs.queue
           WHERE project_id = %(project_id)s AND queue_at <= %(now)s
             AND kind = ANY(%(kinds)s::text[])
             AND (limit_key IS NULL OR limit_key NOT IN (SELECT limit_key FROM blocked))
           ORDER BY priority DESC, actor_seq, created_at, job_id
           LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED) s
   WHERE q.project_id = %(project_id)s AND q.job_id = s.job_id
  RETURNING q.job_id, q.limit_key, q.priority, q.actor_seq, q.created_at
), ins AS (
  INSERT INTO nw_jobs.runs (project_id, job_id, attempt, lease, runner_id, started_at,
                            heartbeat_at, limit_key, entry)
  SELECT %(project_id)s, p.job_id, j.attempt + 1, %(lease)s, %(runner_id)s, %(now)s, %(now)s,
         p.limit_key,
         jsonb_build_object(
           'attempt', j.attempt + 1 - coalesce((j.doc->>'attempt_base')::integer, 0),
           'lease', j.attempt + 1, 'runner_id', %(runner_id)s::text,
           'host', r.info->'host', 'pid', r.info->'pid',
           'started_at', %(now)s::double precision)
    FROM picked p
    JOIN nw_jobs.jobs j ON j.project_id = %(project_id)s AND j.job_id = p.job_id
    LEFT JOIN nw_jobs.runners r ON r.project_id = %(project_id)s AND r.runner_id = %(runner_id)s
  RETURNING job_id, attempt, started_at, heartbeat_at, runner_id, limit_key, entry
)
SELECT false AS held, ins.limit_key, ins.job_id, j.created_at, j.kind, ins.attempt,
       j.cancel_requested, ins.started_at, NULL::double precision AS finished_at,
       ins.heartbeat_at, ins.runner_id,
       jsonb_set(j.doc, '{attempts}',
                 coalesce(CASE WHEN jsonb_typeof(j.doc->'attempts') = 'array'
                               THEN j.doc->'attempts' END, '[]'::jsonb)
                 || jsonb_build_array(ins.entry)) AS doc,
       'running' AS status, NULL::jsonb AS value, NULL::text AS error
  FROM ins JOIN nw_jobs.jobs j ON j.project_id = %(project_id)s AND j.job_id = ins.job_id
 ORDER BY j.priority DESC, j.actor_seq, j.created_at, j.job_id;

-- name: finish_many_and_claim
WITH p AS (
  SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb)
      AS x(job_id text, attempt integer, au_status text, value jsonb, error text,
           cols jsonb, doc jsonb)
), fr AS (
  DELETE FROM nw_jobs.runs r USING p
   WHERE r.project_id = %(project_id)s AND r.job_id = p.job_id
     AND r.attempt = coalesce(p.attempt, r.attempt)
  RETURNING r.*
), fj AS (
  UPDATE nw_jobs.jobs j
     SET attempt = CASE WHEN p.cols ? 'attempt' THEN (p.cols->>'attempt')::integer ELSE fr.attempt END,
         cancel_requested = CASE WHEN p.cols ? 'cancel_requested' THEN (p.cols->>'cancel_requested')::boolean ELSE j.cancel_requested END,
         started_at = CASE WHEN p.cols ? 'started_at' THEN (p.cols->>'started_at')::double precision ELSE fr.started_at END,
         finished_at = CASE WHEN p.cols ? 'finished_at' THEN (p.cols->>'finished_at')::double precision ELSE j.finished_at END,
         heartbeat_at = CASE WHEN p.cols ? 'heartbeat_at' THEN (p.cols->>'heartbeat_at')::double precision ELSE fr.heartbeat_at END,
         runner_id = CASE WHEN p.cols ? 'runner_id' THEN p.cols->>'runner_id' ELSE fr.runner_id END,
         lease = fr.lease,
         doc = jsonb_set(j.doc, '{attempts}',
                   coalesce(CASE WHEN jsonb_typeof(j.doc->'attempts') = 'array'
                                 THEN j.doc->'attempts' END, '[]'::jsonb)
                   || jsonb_build_array(fr.entry)) || p.doc,
         au_status = p.au_status, au_value = p.value, au_error = p.error,
         au_completed_at = now(), queue_at = NULL
    FROM p JOIN fr USING (job_id)
   WHERE j.project_id = %(project_id)s AND j.job_id = fr.job_id
  RETURNING j.job_id
), blocked AS MATERIALIZED (
  SELECT l.limit_key FROM nw_jobs.limits l
   WHERE l.max_running <= (SELECT count(*) FROM nw_jobs.runs r WHERE r.limit_key = l.limit_key
                              AND NOT (r.project_id = %(project_id)s
                                       AND r.job_id = ANY(%(job_ids)s::text[])))
      OR l.per_second <= (SELECT count(*) FROM unnest(l.starts) t WHERE t > %(now)s - 1.0)
), picked AS (
  DELETE FROM nw_jobs.queue q
   USING (SELECT job_id FROM nw_jobs.queue
           WHERE project_id = %(project_id)s AND queue_at <= %(now)s
             AND kind = ANY(%(kinds)s::text[])
             AND (limit_key IS NULL OR limit_key NOT IN (SELECT limit_key FROM blocked))
           ORDER BY priority DESC, actor_seq, created_at, job_id
           LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED) s
   WHERE q.project_id = %(project_id)s AND q.job_id = s.job_id
  RETURNING q.job_id, q.limit_key
), ins AS (
  INSERT INTO nw_jobs.runs (project_id, job_id, attempt, lease, runner_id, started_at,
                            heartbeat_at, limit_key, entry)
  SELECT %(project_id)s, pk.job_id, j.attempt + 1, %(lease)s, %(runner_id)s, %(now)s, %(now)s,
         pk.limit_key,
         jsonb_build_object(
           'attempt', j.attempt + 1 - coalesce((j.doc->>'attempt_base')::integer, 0),
           'lease', j.attempt + 1, 'runner_id', %(runner_id)s::text,
           'host', r.info->'host', 'pid', r.info->'pid',
           'started_at', %(now)s::double precision)
    FROM picked pk
    JOIN nw_jobs.jobs j ON j.project_id = %(project_id)s AND j.job_id = pk.job_id
    LEFT JOIN nw_jobs.runners r ON r.project_id = %(project_id)s AND r.runner_id = %(runner_id)s
  RETURNING job_id, attempt, started_at, heartbeat_at, runner_id, limit_key, entry
)
SELECT (SELECT coalesce(array_agg(job_id), '{}') FROM fj) AS finished, r.*
  FROM (SELECT 1) one
  LEFT JOIN (SELECT row_number() OVER () AS n, false AS held, ins.limit_key, ins.job_id,
                    j.created_at, j.kind, ins.attempt, j.cancel_requested, ins.started_at,
                    NULL::double precision AS finished_at, ins.heartbeat_at, ins.runner_id,
                    jsonb_set(j.doc, '{attempts}',
                              coalesce(CASE WHEN jsonb_typeof(j.doc->'attempts') = 'array'
                                            THEN j.doc->'attempts' END, '[]'::jsonb)
                              || jsonb_build_array(ins.entry)) AS doc,
                    'running' AS status, NULL::jsonb AS value, NULL::text AS error
               FROM ins JOIN nw_jobs.jobs j
                 ON j.project_id = %(project_id)s AND j.job_id = ins.job_id) r ON true
 ORDER BY r.n;
